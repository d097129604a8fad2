// SPDX-License-Identifier: Apache-2.0
// The flight recorder: the ring, its JSON, and the SIGUSR1 dump (recorder.h).
#include "collectives/recorder.h"

#include <grex/communicator.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "core/clock.h"
#include "core/log.h"

namespace grex::detail {

namespace {

uint64_t ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return now_ns();
#endif
}

std::mutex g_mu;                       // the live recorders
std::vector<const Recorder*>* g_live;  // never freed: SIGUSR1's thread may outlive main
int g_pipe[2] = {-1, -1};

void on_sigusr1(int) {
  const char b = 1;
  ssize_t ignored = ::write(g_pipe[1], &b, 1);  // async-signal-safe; the dump runs on its own thread
  (void)ignored;
}

// Once per process, where GREX_TRACE_DUMP is set: SIGUSR1 dumps every ring.
void install_sigusr1() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe2(g_pipe, O_CLOEXEC) != 0) return;
    std::thread([] {
      char b;
      while (::read(g_pipe[0], &b, 1) == 1) Recorder::dump_all();
    }).detach();
    struct sigaction sa {};
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
  });
}

const char* state_name(uint8_t s) {
  switch (s) {
    case Recorder::kRunning: return "running";
    case Recorder::kDone: return "done";
    case Recorder::kFailed: return "failed";
  }
  return "?";
}

}  // namespace

const std::string& Recorder::dump_dir() {
  static const std::string dir = [] {
    const char* d = std::getenv("GREX_TRACE_DUMP");
    return std::string(d != nullptr ? d : "");
  }();
  return dir;
}

Recorder::Recorder(size_t entries, int rank, std::string comm)
    : ring_(new Entry[std::bit_ceil(std::max<size_t>(entries, 1))]),
      n_(std::max<size_t>(entries, 1)),
      mask_(std::bit_ceil(n_) - 1),
      rank_(rank),
      comm_(std::move(comm)),
      tsc0_(ticks()), ns0_(now_ns()) {
  stamp_ = tsc0_ | 1;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_live == nullptr) g_live = new std::vector<const Recorder*>();
  g_live->push_back(this);
  if (!dump_dir().empty()) install_sigusr1();
}

Recorder::~Recorder() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto it = g_live->begin(); it != g_live->end(); ++it)
    if (*it == this) {
      g_live->erase(it);
      break;
    }
}

void Recorder::unpack_args(uint64_t a, int* dtype, int* op, int* root, int* peer) noexcept {
  *dtype = static_cast<int8_t>(a & 0xff);
  *op = static_cast<int8_t>((a >> 8) & 0xff);
  auto rank24 = [](uint64_t v) { return v == 0xffffff ? -1 : static_cast<int>(v); };
  *root = rank24((a >> 16) & 0xffffff);
  *peer = rank24((a >> 40) & 0xffffff);
}

void Recorder::write_entry() noexcept {
  noted_ = false;
  constexpr auto r = std::memory_order_relaxed;
  const uint64_t i = next_.load(r);
  Entry& e = ring_[i & mask_];
  const uint64_t v = e.version.load(r) + 1;  // odd: being written
  e.version.store(v, r);
  std::atomic_thread_fence(std::memory_order_release);
  e.seq.store(i, r);
  e.coll.store(note_coll_.load(r), r);
  e.count.store(note_count_.load(r), r);
  if (++since_ >= every_) [[unlikely]] {  // read the clock: this start is exact (odd)
    read(ticks() | 1);
    e.t0.store(stamp_, r);
  } else {  // no earlier than the newest reading (even), no later than the next
    e.t0.store(stamp_ & ~uint64_t{1}, r);
  }
  e.t1.store(0, r);
  e.bytes.store(0, r);
  e.what.store(note_what_.load(r), r);
  e.args.store(note_args_.load(r), r);
  e.state.store(kRunning, r);
  e.version.store(v + 1, std::memory_order_release);
  next_.store(i + 1, std::memory_order_release);
  running_ = &e;
  running_seq_ = i;
}

void Recorder::read(uint64_t t) noexcept {
  ++clock_reads_;
  if (window_ticks_ == 0) {  // calibrates once a millisecond has passed (until then: all spaced)
    if (const uint64_t ns = now_ns(); ns - ns0_ >= 1'000'000)
      window_ticks_ = std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(kWindowNs) *
                                                                   static_cast<double>(t - tsc0_) /
                                                                   static_cast<double>(ns - ns0_)));
  }
  // The span of the calls since the last reading: under half the window,
  // read half as often; over the window (or none since), for every call.
  const uint64_t span = t >= stamp_ ? t - stamp_ : ~uint64_t{0};
  if (window_ticks_ == 0 || since_ == 0 || span > window_ticks_)
    every_ = 1;
  else if (span <= window_ticks_ / 2)
    every_ = std::min(2 * every_, kMaxEvery);
  since_ = 0;
  stamp_ = t;
}

void Recorder::wait_ended() noexcept {
  if (open_ && !noted_) {
    end_ticks_ = ticks();
    read(end_ticks_ | 1);
  }
}

void Recorder::waiting(const std::vector<int>& peers, uint64_t waited_ns) noexcept {
  if (!open_) return;
  settle();
  // The call began before its wait did (the job status counts from there
  // where the call's own start was not read).
  const uint64_t now = ticks(), back = static_cast<uint64_t>(static_cast<double>(waited_ns) / ns_per_tick());
  constexpr auto r = std::memory_order_relaxed;
  wait_seq_.store(UINT64_MAX, r);
  std::atomic_thread_fence(std::memory_order_release);
  const size_t n = std::min(peers.size(), kWaitPeers);
  for (size_t i = 0; i < n; ++i) wait_peers_[i].store(peers[i], r);
  wait_n_.store(static_cast<uint32_t>(n), r);
  wait_since_.store(now - std::min(back, now), r);
  wait_seq_.store(running_seq_, std::memory_order_release);
}

double Recorder::ns_per_tick() const noexcept {
  const uint64_t tnow = ticks(), nsnow = now_ns();
  return tnow > tsc0_ && nsnow > ns0_ ? static_cast<double>(nsnow - ns0_) / static_cast<double>(tnow - tsc0_) : 1.0;
}

bool Recorder::take_note(uint64_t upto, Copy* x) const noexcept {
  constexpr auto r = std::memory_order_relaxed;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const uint64_t v0 = note_version_.load(std::memory_order_acquire);
    if (v0 & 1) continue;
    *x = Copy{};
    x->seq = note_seq_.load(r);
    x->coll = note_coll_.load(r);
    x->count = note_count_.load(r);
    x->what = note_what_.load(r);
    unpack_args(note_args_.load(r), &x->dtype, &x->op, &x->root, &x->peer);
    x->state = kRunning;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (note_version_.load(r) != v0) continue;
    // Noted and not yet in the ring: the newest call, begun and not waiting yet.
    return x->what != nullptr && x->seq != UINT64_MAX && x->seq >= upto;
  }
  return false;
}

Recorder::Snapshot Recorder::snapshot() const {
  Snapshot s;
  const double npt = ns_per_tick();
  const uint64_t tnow = ticks();
  const uint64_t upto = next_.load(std::memory_order_acquire);
  auto newest = [&s](const Copy& x, double ms) {
    s.any = true;
    s.what = x.what;
    s.coll = x.coll;
    s.count = x.count;
    s.dtype = x.dtype;
    s.op = x.op;
    s.root = x.root;
    s.peer = x.peer;
    s.state = x.state;
    s.ms = ms;
  };
  auto collective = [&s](const Copy& x) {
    s.coll_what = x.what;
    s.coll_seq = x.coll;
    s.colls_done = x.state == kRunning ? x.coll - 1 : x.coll;
  };
  Copy x{};
  if (take_note(upto, &x)) {
    newest(x, 0.0);  // it has not waited yet: begun just now, as far as the ring knows
    if (x.coll > 0) {
      collective(x);
      return s;
    }
  }
  // Newest first, far enough back to find the newest collective among point-to-point calls.
  const uint64_t oldest = upto > std::min<uint64_t>(n_, 4096) ? upto - std::min<uint64_t>(n_, 4096) : 0;
  for (uint64_t i = upto; i-- > oldest;) {
    bool got = false;
    for (int attempt = 0; attempt < 100 && !(got = take(i, &x)); ++attempt) {
      if (ring_[i & mask_].seq.load(std::memory_order_relaxed) > i) break;  // a newer lap: nothing older to find
    }
    if (!got) break;
    if (!s.any) {
      // Running: since its start, or where its start was not read, since
      // its wait began (published once it waited long) or the reading before
      // it. Ended: since its end, or its start where it ended about then.
      uint64_t since = x.state == kRunning || x.t1 == 0 ? x.t0 : x.t1;
      if (x.state == kRunning) {
        constexpr auto r = std::memory_order_relaxed;
        const uint64_t w0 = wait_seq_.load(std::memory_order_acquire);
        const uint32_t wn = std::min<uint32_t>(wait_n_.load(r), kWaitPeers);
        std::vector<int> peers;
        for (uint32_t k = 0; k < wn; ++k) peers.push_back(wait_peers_[k].load(r));
        const uint64_t wsince = wait_since_.load(r);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (w0 == i && wait_seq_.load(r) == w0) {
          s.waiting_on = std::move(peers);
          if ((x.t0 & 1) == 0 && wsince > since) since = wsince;
        }
      }
      newest(x, tnow > since ? static_cast<double>(tnow - since) * npt / 1e6 : 0.0);
    }
    if (x.coll > 0) {
      collective(x);
      return s;
    }
  }
  return s;
}

bool Recorder::take(uint64_t i, Copy* x) const noexcept {
  const Entry& e = ring_[i & mask_];
  constexpr auto r = std::memory_order_relaxed;
  const uint64_t v0 = e.version.load(std::memory_order_acquire);
  if (v0 & 1) return false;
  // The state first: end() writes the end time and bytes before it, under no new version.
  const uint8_t state = e.state.load(std::memory_order_acquire);
  *x = Copy{e.seq.load(r), e.coll.load(r), e.count.load(r), e.t0.load(r), e.t1.load(r), e.bytes.load(r),
            e.what.load(r), -1, -1, -1, -1, state};
  const uint64_t args = e.args.load(r);
  std::atomic_thread_fence(std::memory_order_acquire);
  unpack_args(args, &x->dtype, &x->op, &x->root, &x->peer);
  return e.version.load(r) == v0 && x->seq == i && x->what != nullptr;
}

std::string Recorder::json() const {
  const uint64_t tnow = ticks();
  const double ns_per_tick = this->ns_per_tick();
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"rank\": %d, \"host\": \"%s\", \"pid\": %d, \"comm\": \"%s\", \"entries\": [", rank_, host,
                static_cast<int>(getpid()), comm_.c_str());
  out += buf;
  bool first = true;
  // Oldest first. Copies taken under the entry's version; one written meanwhile is left out.
  // Then the call begun and not yet waiting, if any: its start time is not taken yet.
  const uint64_t upto = next_.load(std::memory_order_acquire);
  std::vector<Copy> xs;
  for (uint64_t i = upto > n_ ? upto - n_ : 0; i < upto; ++i)
    if (Copy x{}; take(i, &x)) xs.push_back(x);
  Copy noted{};
  const bool has_noted = take_note(upto, &noted);
  // The running call's wait, where it published one.
  constexpr auto r = std::memory_order_relaxed;
  const uint64_t w0 = wait_seq_.load(std::memory_order_acquire), wsince = wait_since_.load(r);
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t wait_of = wait_seq_.load(r) == w0 ? w0 : UINT64_MAX;
  for (size_t k = 0; k <= xs.size(); ++k) {
    const bool is_noted = k == xs.size();
    if (is_noted && !has_noted) break;
    const Copy& x = is_noted ? noted : xs[k];
    const auto [seq, coll, count, t0, t1, bytes, what, root, peer, dtype, op, state] = x;
    // The start: exact where its tick count is odd; else after the reading
    // t0 and before the next one, the first later entry's start that differs
    // (or its own end, or its wait's start, or now). Written as the middle,
    // and how far it may be off.
    const uint64_t lo = t0 & ~uint64_t{1};
    uint64_t hi = lo;
    if ((t0 & 1) == 0) {
      hi = std::max(tnow, lo);
      if (t1 != 0) hi = std::min(hi, t1);
      if (seq == wait_of && wsince >= lo) hi = std::min(hi, wsince);
      for (size_t j = k + 1; j < xs.size(); ++j)
        if ((xs[j].t0 & ~uint64_t{1}) > lo || (xs[j].t0 & 1) != 0) {
          hi = std::min(hi, xs[j].t0);
          break;
        }
    }
    const uint64_t mid = lo + (hi - lo) / 2;
    char ago[48] = "null";
    if (!is_noted) std::snprintf(ago, sizeof ago, "%.0f", static_cast<double>(tnow - std::min(tnow, mid)) * ns_per_tick);
    char within[64] = "";
    if (!is_noted && hi != lo)
      std::snprintf(within, sizeof within, ", \"started_within_ns\": %.0f", static_cast<double>(hi - mid) * ns_per_tick);
    char dur[48] = "null";
    if (state != kRunning)
      std::snprintf(dur, sizeof dur, "%.0f", t1 > mid ? static_cast<double>(t1 - mid) * ns_per_tick : 0.0);
    const std::string dt = dtype >= 0 ? std::string(dtype_name(static_cast<DataType>(dtype))) : "";
    const std::string rop = op >= 0 ? std::string(reduce_op_name(static_cast<ReduceOp>(op))) : "";
    std::snprintf(buf, sizeof buf,
                  "%s\n  {\"seq\": %llu, \"coll\": %llu, \"op\": \"%s\", \"count\": %llu, \"dtype\": \"%s\", "
                  "\"redop\": \"%s\", \"root\": %d, \"peer\": %d, \"state\": \"%s\", \"started_ns_ago\": %s%s, "
                  "\"duration_ns\": %s, \"bytes\": %llu}",
                  first ? "" : ",", static_cast<unsigned long long>(seq), static_cast<unsigned long long>(coll), what,
                  static_cast<unsigned long long>(count), dt.c_str(), rop.c_str(), root, peer, state_name(state), ago,
                  within, dur, static_cast<unsigned long long>(bytes));
    out += buf;
    first = false;
  }
  out += "\n]}\n";
  return out;
}

std::string Recorder::dump(const std::string& dir) const {
  std::string name = comm_;
  for (char& ch : name)
    if (ch == '/' || ch == ' ') ch = '_';
  const std::string path = dir + "/grex-trace." + std::to_string(rank_) + "." + name + ".json";
  const std::string body = json();
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "";
  const bool whole = ::write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
  ::close(fd);
  if (!whole || ::rename(tmp.c_str(), path.c_str()) != 0) return "";
  return path;
}

void Recorder::dump_all() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_live == nullptr) return;
  for (const Recorder* r : *g_live) {
    const std::string path = r->dump(dump_dir());
    if (path.empty())
      GREX_WARN("comm", "GREX_TRACE_DUMP: cannot write to %s: %s", dump_dir().c_str(), std::strerror(errno));
    else
      GREX_INFO("comm", "flight recorder written to %s (SIGUSR1)", path.c_str());
  }
}

}  // namespace grex::detail
