// SPDX-License-Identifier: Apache-2.0
// The perftest style modes: send_bw, write_bw (a window of -t requests in
// flight on each of -q flows) and send_lat, write_lat (ping-pong), driven on
// the transport contract directly, as perftest drives verbs.
//
// Each size is one round: the server (rank 1) gets ready and says so through
// the store, the client (rank 0) runs the warmup and the timed phase, then
// ends the round in band (a zero-length message, or a write with immediate
// kImmEnd) so no receive stays posted into the next size.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <string>
#include <vector>

#include "core/clock.h"
#include "perf_common.h"
#include "perf_pair.h"

namespace grex::perf {
namespace {

constexpr uint64_t kTagData = 1;
constexpr uint32_t kImmData = 1;
constexpr uint32_t kImmEnd = 2;
constexpr int kMaxBatch = 32;                 // requests per post call
constexpr int kServerRxDepth = 512;           // perftest's default rx depth
constexpr int kPeakBlock = 64;                // completions per block of the peak bandwidth
constexpr size_t kMaxLatencySamples = 10'000'000;
constexpr int64_t kDefaultStallMs = 60'000;
constexpr size_t kMemcpyBudgetBytes = size_t{1} << 30;  // bytes copied per --memcpy-ref measurement

// What one side measured for one size.
struct BwSample {
  int64_t iters = 0;    // timed messages per flow
  double peak_gbs = 0;  // best block of kPeakBlock completions
  double avg_gbs = 0;   // all timed bytes over the timed interval
  double mpps = 0;
};

// Peak bandwidth over blocks of completions: one completion at a time would
// see batches of completions as absurd rates.
class PeakMeter {
 public:
  explicit PeakMeter(size_t bytes, int block) : bytes_(bytes), block_(block) {}
  void completion(uint64_t now) {
    if (n_ == 0) start_ = now;
    if (++n_ == block_) {
      if (now > start_) best_ = std::max(best_, static_cast<double>(bytes_) * block_ / static_cast<double>(now - start_));
      n_ = 0;
    }
  }
  double best(double average) const { return std::max(best_, average); }

 private:
  size_t bytes_;
  int block_;
  int n_ = 0;
  uint64_t start_ = 0;
  double best_ = 0;
};

int64_t stall_ms() {
  const char* v = std::getenv("GREX_TIMEOUT_MS");
  long long ms = v != nullptr ? std::atoll(v) : 0;
  return ms > 0 ? ms : kDefaultStallMs;
}

// Polls every flow and hands each completion to fn(flow, completion). Fails on
// an unsuccessful completion and when nothing completed for GREX_TIMEOUT_MS.
class Poller {
 public:
  explicit Poller(PairJob& job) : job_(job), stall_ns_(static_cast<uint64_t>(stall_ms()) * 1'000'000) {}
  template <typename Fn>
  Result<void> poll(Fn&& fn) {
    bool any = false;
    auto& flows = job_.flows();
    for (size_t f = 0; f < flows.size(); ++f) {
      size_t n = flows[f].device->poll(cq_);
      for (size_t i = 0; i < n; ++i) {
        const Completion& c = cq_[i];
        if (c.status != Status::kSuccess)
          return Error(c.status == Status::kPeerGone ? Errc::kPeerFailed : Errc::kConnectionFailed,
                       "grex-perf: flow " + std::to_string(f) + ": a completion failed: " +
                           std::string(status_name(c.status)))
              .rank(job_.rank())
              .peer(c.peer);
        fn(f, c);
      }
      any |= n > 0;
    }
    uint64_t now = now_ns();
    if (any || last_ == 0) last_ = now;
    if (now - last_ > stall_ns_)
      return Error(Errc::kTimeout, "grex-perf: no completion for " + std::to_string(stall_ns_ / 1'000'000) + " ms")
          .rank(job_.rank())
          .hint("is the other side still running with the same options? (GREX_TIMEOUT_MS)");
    return ok();
  }

 private:
  PairJob& job_;
  uint64_t stall_ns_;
  uint64_t last_ = 0;
  std::array<Completion, 64> cq_{};
};

Error post_failed(const PairJob& job, size_t flow, Errc e, const char* what) {
  return Error(e, std::string("grex-perf: flow ") + std::to_string(flow) + ": " + what + " was refused")
      .rank(job.rank());
}

// Posts up to n sends (or writes) of `bytes` from offset 0 on flow f.
PostResult post_out(PairFlow& fl, Mode mode, size_t bytes, int n, bool with_imm = false, uint32_t imm = 0,
                    size_t remote_offset = 0) {
  if (is_write(mode)) {
    std::array<WriteRequest, kMaxBatch> w{};
    for (int i = 0; i < n; ++i) {
      w[static_cast<size_t>(i)] = WriteRequest{.region = fl.region, .length = bytes, .remote = fl.peer_region,
                                               .remote_offset = remote_offset, .imm = imm, .with_imm = with_imm};
    }
    return fl.endpoint->post_write(std::span(w.data(), static_cast<size_t>(n)));
  }
  std::array<SendRequest, kMaxBatch> s{};
  for (int i = 0; i < n; ++i) s[static_cast<size_t>(i)] = SendRequest{.region = fl.region, .length = bytes, .tag = kTagData};
  return fl.endpoint->post_send(std::span(s.data(), static_cast<size_t>(n)));
}

// Client: streams on every flow with `depth` requests in flight, `iters` per
// flow or, with duration_s > 0, until that many seconds passed.
Result<BwSample> stream(PairJob& job, Mode mode, size_t bytes, int depth, int64_t iters, double duration_s) {
  auto& flows = job.flows();
  struct State {
    int64_t posted = 0, done = 0;
    int inflight = 0;
  };
  std::vector<State> st(flows.size());
  PeakMeter peak(bytes, std::max(depth, kPeakBlock));
  Poller poller(job);
  const uint64_t t0 = now_ns();
  const bool by_time = duration_s > 0;
  const uint64_t deadline = by_time ? t0 + static_cast<uint64_t>(duration_s * 1e9) : UINT64_MAX;
  for (bool busy = true; busy;) {
    const bool posting = !by_time || now_ns() < deadline;
    busy = false;
    for (size_t f = 0; f < flows.size(); ++f) {
      State& s = st[f];
      int64_t want = std::min<int64_t>(depth - s.inflight, kMaxBatch);
      if (!by_time) want = std::min(want, iters - s.posted);
      if (posting && want > 0) {
        PostResult pr = post_out(flows[f], mode, bytes, static_cast<int>(want));
        if (pr.error != Errc::kOk) return post_failed(job, f, pr.error, is_write(mode) ? "a write" : "a send");
        s.posted += static_cast<int64_t>(pr.count);
        s.inflight += static_cast<int>(pr.count);
      }
    }
    GREX_TRY(poller.poll([&](size_t f, const Completion& c) {
      if (c.op != Op::kSend && c.op != Op::kWrite) return;
      --st[f].inflight;
      ++st[f].done;
      peak.completion(now_ns());
    }));
    for (const State& s : st) busy |= s.inflight > 0 || (by_time ? posting : s.posted < iters);
  }
  const uint64_t ns = std::max<uint64_t>(now_ns() - t0, 1);
  int64_t done = 0;
  for (const State& s : st) done += s.done;
  BwSample r;
  r.iters = done / static_cast<int64_t>(flows.size());
  r.avg_gbs = static_cast<double>(bytes) * static_cast<double>(done) / static_cast<double>(ns);
  r.peak_gbs = peak.best(r.avg_gbs);
  r.mpps = static_cast<double>(done) * 1e3 / static_cast<double>(ns);
  return r;
}

// Client: ends the round on every flow in band and waits until that is done.
// send_bw: a zero-length message, then as many more as the server has
// receives still posted; write_bw: a write with immediate kImmEnd.
Result<void> end_round(PairJob& job, Mode mode, size_t bytes, size_t round) {
  auto& flows = job.flows();
  auto post_all = [&](std::vector<int64_t> counts) -> Result<void> {
    Poller poller(job);
    std::vector<int64_t> inflight(flows.size(), 0);
    for (bool busy = true; busy;) {
      busy = false;
      for (size_t f = 0; f < flows.size(); ++f) {
        int n = static_cast<int>(std::min<int64_t>(counts[f], kMaxBatch));
        if (n > 0) {
          PostResult pr = is_write(mode) ? post_out(flows[f], mode, bytes, n, true, kImmEnd)
                                         : post_out(flows[f], mode, 0, n);
          if (pr.error != Errc::kOk) return post_failed(job, f, pr.error, "the end of a round");
          counts[f] -= static_cast<int64_t>(pr.count);
          inflight[f] += static_cast<int64_t>(pr.count);
        }
      }
      GREX_TRY(poller.poll([&](size_t f, const Completion& c) {
        if (c.op == Op::kSend || c.op == Op::kWrite) --inflight[f];
      }));
      for (size_t f = 0; f < flows.size(); ++f) busy |= counts[f] > 0 || inflight[f] > 0;
    }
    return ok();
  };
  GREX_TRY(post_all(std::vector<int64_t>(flows.size(), 1)));
  if (is_write(mode)) return ok();
  std::vector<int64_t> fill(flows.size());
  for (size_t f = 0; f < flows.size(); ++f)
    fill[f] = std::stoll(GREX_TRY(job.take("fill/" + std::to_string(round) + "/" + std::to_string(f))));
  return post_all(std::move(fill));
}

// Server side of send_bw / write_bw for one round. send_bw: keeps `rx_depth`
// receives posted per flow and measures from the end of the warmup to the last
// message; write_bw: only waits for the end (the writes need no receiver, but
// drivers that land bytes in poll() need polling). Returns what it measured.
Result<BwSample> serve_round(PairJob& job, Mode mode, size_t bytes, int64_t warmup, size_t round) {
  auto& flows = job.flows();
  const bool sends = !is_write(mode);
  const int rx_depth = static_cast<int>(std::min<uint32_t>(job.capabilities().queue_depth, kServerRxDepth));
  struct State {
    int posted = 0;  // receives outstanding
    bool ended = false;
  };
  std::vector<State> st(flows.size());
  auto post_recvs = [&](size_t f, int n) -> Result<void> {
    std::array<RecvRequest, kMaxBatch> r{};
    while (n > 0) {
      int k = std::min(n, kMaxBatch);
      for (int i = 0; i < k; ++i)
        r[static_cast<size_t>(i)] = RecvRequest{.region = flows[f].region, .length = bytes, .tag = kTagData};
      PostResult pr = flows[f].endpoint->post_recv(std::span(r.data(), static_cast<size_t>(k)));
      if (pr.error != Errc::kOk || pr.count == 0) return post_failed(job, f, pr.error, "a receive");
      st[f].posted += static_cast<int>(pr.count);
      n -= static_cast<int>(pr.count);
    }
    return ok();
  };
  if (sends)
    for (size_t f = 0; f < flows.size(); ++f) GREX_TRY(post_recvs(f, rx_depth));
  GREX_TRY(job.put("ready/" + std::to_string(round), "1"));

  int64_t received = 0, timed = 0;
  uint64_t t_start = 0, t_last = 0;
  // Receives complete in bursts (a driver delivers what arrived since the last
  // poll): the server's peak takes blocks of several receive windows.
  PeakMeter peak(bytes, 4 * kServerRxDepth);
  Poller poller(job);
  std::vector<size_t> repost;
  for (size_t ended = 0; ended < flows.size();) {
    repost.clear();
    GREX_TRY(poller.poll([&](size_t f, const Completion& c) {
      if (c.op == Op::kRemoteWrite && c.imm == kImmEnd) {
        st[f].ended = true;
        ++ended;
      }
      if (c.op != Op::kRecv) return;
      --st[f].posted;
      if (c.bytes == 0) {
        st[f].ended = true;
        ++ended;
        return;
      }
      uint64_t now = now_ns();
      if (++received <= warmup * static_cast<int64_t>(flows.size()) || t_start == 0) {
        t_start = now;  // the timed interval starts at the last warmup message
      } else {
        ++timed;
        t_last = now;
        peak.completion(now);
      }
      if (!st[f].ended) repost.push_back(f);
    }));
    for (size_t f : repost) GREX_TRY(post_recvs(f, 1));
  }
  if (sends) {
    // The client sends one zero-length message per receive still posted.
    for (size_t f = 0; f < flows.size(); ++f)
      GREX_TRY(job.put("fill/" + std::to_string(round) + "/" + std::to_string(f), std::to_string(st[f].posted)));
    auto outstanding = [&] {
      int n = 0;
      for (const State& s : st) n += s.posted;
      return n;
    };
    while (outstanding() > 0)
      GREX_TRY(poller.poll([&](size_t f, const Completion& c) {
        if (c.op == Op::kRecv) --st[f].posted;
      }));
  }
  BwSample r;
  const uint64_t ns = t_last > t_start ? t_last - t_start : 0;
  r.iters = timed / static_cast<int64_t>(flows.size());
  if (ns > 0) {
    r.avg_gbs = static_cast<double>(bytes) * static_cast<double>(timed) / static_cast<double>(ns);
    r.mpps = static_cast<double>(timed) * 1e3 / static_cast<double>(ns);
  }
  r.peak_gbs = peak.best(r.avg_gbs);
  return r;
}

// Single-core memcpy bandwidth (GB/s) for `bytes`, for --memcpy-ref.
double memcpy_gbs(void* dst, const void* src, size_t bytes) {
  size_t reps = std::clamp<size_t>(kMemcpyBudgetBytes / std::max<size_t>(bytes, 1), 3, 1'000'000);
  std::memcpy(dst, src, bytes);  // warm caches and TLB
  uint64_t t0 = now_ns();
  for (size_t i = 0; i < reps; ++i) {
    std::memcpy(dst, src, bytes);
    asm volatile("" : : "r"(dst) : "memory");  // keep every copy
  }
  uint64_t ns = std::max<uint64_t>(now_ns() - t0, 1);
  return static_cast<double>(bytes) * static_cast<double>(reps) / static_cast<double>(ns);
}

// The rounds a latency run makes: `iters` after `warmup`, or with duration_s
// > 0 as many as fit after the warmup.
class LatencyBudget {
 public:
  LatencyBudget(int64_t warmup, int64_t iters, double duration_s)
      : warmup_(warmup), iters_(iters), duration_ns_(duration_s > 0 ? static_cast<uint64_t>(duration_s * 1e9) : 0) {}
  bool more(int64_t i, size_t samples) {
    if (i == warmup_ && duration_ns_ > 0) deadline_ = now_ns() + duration_ns_;
    if (samples >= kMaxLatencySamples) return false;
    return duration_ns_ > 0 ? i < warmup_ || now_ns() < deadline_ : i < warmup_ + iters_;
  }
  bool timed(int64_t i) const { return i >= warmup_; }

 private:
  int64_t warmup_, iters_;
  uint64_t duration_ns_;
  uint64_t deadline_ = UINT64_MAX;
};

// send_lat on flow 0 for one size: the client times round trips of tagged
// messages, then ends the round with a zero-length one; the server answers
// each message until then. Message and reply use the two halves of the buffer,
// so a reply never lands in a send still in flight.
Result<std::vector<double>> ping_pong_sends(PairJob& job, size_t bytes, size_t max_bytes, LatencyBudget budget,
                                            size_t round) {
  PairFlow& fl = job.flows().front();
  Poller poller(job);
  int sends_inflight = 0;
  bool got_reply = false, got_end = false;
  auto on = [&](size_t, const Completion& c) {
    if (c.op == Op::kSend) --sends_inflight;
    if (c.op == Op::kRecv) (c.bytes == 0 ? got_end : got_reply) = true;
  };
  auto post_recv = [&]() -> Result<void> {
    RecvRequest r{.region = fl.region, .offset = max_bytes, .length = bytes, .tag = kTagData};
    PostResult pr = fl.endpoint->post_recv(std::span(&r, 1));
    if (pr.count != 1) return post_failed(job, 0, pr.error, "a receive");
    return ok();
  };
  auto send = [&](size_t len) -> Result<void> {
    PostResult pr = post_out(fl, Mode::kSendLat, len, 1);
    if (pr.count != 1) return post_failed(job, 0, pr.error, "a send");
    ++sends_inflight;
    return ok();
  };
  auto wait_for = [&](auto&& done) -> Result<void> {
    while (!done()) GREX_TRY(poller.poll(on));
    return ok();
  };
  std::vector<double> samples;
  if (!job.client()) {
    GREX_TRY(post_recv());
    GREX_TRY(job.put("ready/" + std::to_string(round), "1"));
    for (;;) {
      GREX_TRY(wait_for([&] { return got_reply || got_end; }));
      if (got_end) break;
      got_reply = false;
      GREX_TRY(post_recv());
      GREX_TRY(send(bytes));
    }
    GREX_TRY(wait_for([&] { return sends_inflight == 0; }));
    return samples;
  }
  GREX_TRY(job.take("ready/" + std::to_string(round)));
  for (int64_t i = 0; budget.more(i, samples.size()); ++i) {
    const uint64_t t0 = now_ns();
    GREX_TRY(post_recv());
    GREX_TRY(send(bytes));
    GREX_TRY(wait_for([&] { return got_reply && sends_inflight == 0; }));
    got_reply = false;
    if (budget.timed(i)) samples.push_back(static_cast<double>(now_ns() - t0) / 2e3);
  }
  GREX_TRY(send(0));
  GREX_TRY(wait_for([&] { return sends_inflight == 0; }));
  return samples;
}

// write_lat as ib_write_lat: plain writes (no immediate) into the other side's
// second half; each side spins on the last byte of its own landing area until
// round trip i's mark arrives, polling the device every 64 loads (shm and dpdk
// move the bytes inside poll(); a verbs write lands without it). The client
// ends the round with a write with immediate kImmEnd.
Result<std::vector<double>> ping_pong_writes(PairJob& job, size_t bytes, size_t max_bytes, LatencyBudget budget,
                                             size_t round) {
  PairFlow& fl = job.flows().front();
  Poller poller(job);
  auto* base = static_cast<uint8_t*>(fl.region->addr());
  uint8_t* landing_last = base + max_bytes + bytes - 1;
  uint8_t* source_last = base + bytes - 1;
  std::memset(base + max_bytes, 0, bytes);
  auto mark = [](int64_t i) { return static_cast<uint8_t>(1 + i % 255); };  // never 0, differs from the last
  int writes_inflight = 0;
  bool got_end = false;
  auto on = [&](size_t, const Completion& c) {
    if (c.op == Op::kWrite) --writes_inflight;
    if (c.op == Op::kRemoteWrite && c.imm == kImmEnd) got_end = true;
  };
  // Waits for mark(i) in the landing area; false when the round ended instead.
  auto arrived = [&](int64_t i) -> Result<bool> {
    for (uint32_t spins = 0;; ++spins) {
      if (__atomic_load_n(landing_last, __ATOMIC_ACQUIRE) == mark(i)) return true;
      if ((spins & 63) == 0) {
        GREX_TRY(poller.poll(on));
        if (got_end) return false;
      }
    }
  };
  auto write = [&](int64_t i, bool end) -> Result<void> {
    *source_last = mark(i);
    PostResult pr = post_out(fl, Mode::kWriteLat, bytes, 1, end, end ? kImmEnd : 0, max_bytes);
    if (pr.count != 1) return post_failed(job, 0, pr.error, "a write");
    ++writes_inflight;
    return ok();
  };
  auto reap = [&]() -> Result<void> {
    while (writes_inflight > 0) GREX_TRY(poller.poll(on));
    return ok();
  };
  std::vector<double> samples;
  if (!job.client()) {
    GREX_TRY(job.put("ready/" + std::to_string(round), "1"));
    for (int64_t i = 0; GREX_TRY(arrived(i)); ++i) {
      GREX_TRY(write(i, false));
      GREX_TRY(reap());
    }
    return samples;
  }
  GREX_TRY(job.take("ready/" + std::to_string(round)));
  int64_t i = 0;
  for (; budget.more(i, samples.size()); ++i) {
    const uint64_t t0 = now_ns();
    GREX_TRY(write(i, false));
    GREX_TRY(reap());
    if (!GREX_TRY(arrived(i))) return Error(Errc::kProtocol, "grex-perf: the server ended a write_lat round");
    if (budget.timed(i)) samples.push_back(static_cast<double>(now_ns() - t0) / 2e3);
  }
  GREX_TRY(write(i, true));
  GREX_TRY(reap());
  return samples;
}

std::string preamble(const PairJob& job, const PerfArgs& a, const char* title) {
  const Capabilities& caps = job.capabilities();
  std::string budget = a.duration_s > 0 ? "Duration       : " + std::to_string(a.duration_s).substr(0, 6) + " s"
                                        : "Iterations     : " + std::to_string(a.effective_iters());
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "%s%20s%s\n"
                " Backend         : %-16s Device         : %s\n"
                " Ranks           : %-16s Flows (-q)     : %d\n"
                " Buffers         : %-16s %s (+%d warmup)\n"
                " TX depth        : %-16s Connection     : %s\n",
                p2p_rule().c_str(), "", title, caps.driver.c_str(), caps.device_name.c_str(),
                job.server_client() ? (job.client() ? "client (rank 0)" : "server (rank 1)") : "0 <-> 1",
                is_bw(a.mode) ? a.flows : 1, a.shared_buffers ? "alloc (device)" : "malloc", budget.c_str(),
                a.effective_warmup(), is_bw(a.mode) ? std::to_string(a.tx_depth).c_str() : "1",
                job.server_client() ? ("server/client, port " + std::to_string(a.port)).c_str() : "launcher");
  std::string out = buf;
  if (const char* cc = std::getenv("GREX_CC"); cc != nullptr && *cc != '\0') out += std::string(" CC              : ") + cc + "\n";
  if (a.rdma_cm) out += " -R              : verbs connects through rdma_cm always\n";
  return out + p2p_rule();
}

JsonObject environment_of(const PairJob& job, const PerfArgs& a) {
  JsonObject env = common_environment(a, job.capabilities(), job.size());
  env.emplace_back("flows", int64_t{is_bw(a.mode) ? a.flows : 1});
  env.emplace_back("tx_depth", int64_t{is_bw(a.mode) ? a.tx_depth : 1});
  env.emplace_back("connection", std::string(job.server_client() ? "server/client" : "launcher"));
  return env;
}

Result<int> finish(PairJob& job, const PerfArgs& a, const std::vector<JsonObject>& rows, const PlotData& plot) {
  job.print(p2p_rule());
  for (int r = 0; a.stats && r <= PairJob::kServer; ++r) {  // rank 0's counters first
    if (r == job.rank()) {
      std::string lines = job.counter_lines();
      std::fwrite(lines.data(), 1, lines.size(), stdout);
      std::fflush(stdout);
    }
    GREX_TRY(job.barrier("stats"));
  }
  GREX_TRY(job.barrier("done"));
  if (!job.client()) return 0;  // rank 0 writes the files
  if (!a.json_path.empty())
    GREX_TRY(write_text_file(a.json_path, render_json({{"mode", std::string(mode_name(a.mode))}},
                                                      environment_of(job, a), rows)));
  if (!a.plot_path.empty()) GREX_TRY(write_plot(a.plot_path, plot));
  return 0;
}

}  // namespace

Result<int> run_bw(const PerfArgs& a) {
  std::vector<size_t> sizes = p2p_sizes(a);
  auto job = GREX_TRY(PairJob::connect(a, sizes.back()));
  const bool writes = is_write(a.mode);
  const bool measures = job->client() || !writes;  // a write_bw server sees no traffic to measure
  std::string title = writes ? "RDMA_Write BW Test" : "Send BW Test";
  std::string header = bw_header(a.report_gbits, a.memcpy_ref && job->client());
  if (!measures) header = "# the client measures write_bw: its table is the result\n";
  job->print(preamble(*job, a, title.c_str()) + header);
  const double unit = a.report_gbits ? 8.0 : 1e9 / 1048576.0;  // GB/s -> Gb/sec or perftest's MB/sec
  const int64_t iters = a.effective_iters(), warmup = a.effective_warmup();
  std::vector<JsonObject> rows;
  PlotData plot{"grex-perf " + std::string(mode_name(a.mode)) + " (" + job->capabilities().driver + ")",
                a.report_gbits ? "Gb/s" : "MB/s (2^20 bytes)", {"BW average"}, {}};
  std::vector<unsigned char> copy_dst;
  if (a.memcpy_ref && job->client()) copy_dst.resize(sizes.back());
  Progress progress(job->client(), sizes.size());
  for (size_t round = 0; round < sizes.size(); ++round) {
    const size_t bytes = sizes[round];
    BwSample s;
    double ref = -1.0;
    if (job->client()) {
      if (a.memcpy_ref) ref = memcpy_gbs(copy_dst.data(), job->flows().front().buffer == nullptr
                                                              ? job->flows().front().region->addr()
                                                              : job->flows().front().buffer,
                                         bytes);
      GREX_TRY(job->take("ready/" + std::to_string(round)));
      if (warmup > 0) GREX_TRY(stream(*job, a.mode, bytes, a.tx_depth, warmup, 0));
      s = GREX_TRY(stream(*job, a.mode, bytes, a.tx_depth, iters, a.duration_s));
      GREX_TRY(end_round(*job, a.mode, bytes, round));
    } else if (job->active()) {
      s = GREX_TRY(serve_round(*job, a.mode, bytes, warmup, round));
    }
    if (measures && job->prints()) {
      double ratio = ref > 0 ? s.avg_gbs / ref : 0.0;
      job->print(bw_row(bytes, static_cast<int>(s.iters), s.peak_gbs * unit, s.avg_gbs * unit, s.mpps, ref, ratio));
      rows.push_back({{"bytes", static_cast<int64_t>(bytes)}, {"iterations", s.iters}, {"bw_peak_gbs", s.peak_gbs},
                      {"bw_avg_gbs", s.avg_gbs}, {"msg_rate_mpps", s.mpps}});
      if (ref > 0) {
        rows.back().emplace_back("memcpy_gbs", ref);
        rows.back().emplace_back("ratio", ratio);
      }
      plot.points.push_back({bytes, {s.avg_gbs * unit}});
    }
    progress.step(round + 1, std::to_string(bytes) + " B");
  }
  progress.done();
  return finish(*job, a, rows, plot);
}

Result<int> run_lat(const PerfArgs& a) {
  std::vector<size_t> sizes = p2p_sizes(a);
  // Message and reply use the two halves of the buffer.
  auto job = GREX_TRY(PairJob::connect(a, 2 * sizes.back()));
  std::string title = is_write(a.mode) ? "RDMA_Write Latency Test" : "Send Latency Test";
  job->print(preamble(*job, a, title.c_str()) +
             (job->client() ? lat_header() : "# the client times the round trips: its table is the result\n"));
  std::vector<JsonObject> rows;
  PlotData plot{"grex-perf " + std::string(mode_name(a.mode)) + " (" + job->capabilities().driver + ")", "usec",
                {"t_typical", "99% percentile"}, {}};
  Progress progress(job->client(), sizes.size());
  for (size_t round = 0; round < sizes.size(); ++round) {
    const size_t bytes = sizes[round];
    if (job->active()) {
      LatencyBudget budget(a.effective_warmup(), a.effective_iters(), a.duration_s);
      std::vector<double> samples =
          GREX_TRY(is_write(a.mode) ? ping_pong_writes(*job, bytes, sizes.back(), budget, round)
                                    : ping_pong_sends(*job, bytes, sizes.back(), budget, round));
      if (job->client()) {
        int64_t n = static_cast<int64_t>(samples.size());
        LatencyStats s = latency_stats(samples);
        job->print(lat_row(bytes, static_cast<int>(n), s));
        rows.push_back({{"bytes", static_cast<int64_t>(bytes)}, {"iterations", n}, {"t_min_us", s.min},
                        {"t_max_us", s.max}, {"t_typical_us", s.typical}, {"t_avg_us", s.avg},
                        {"t_stdev_us", s.stdev}, {"p99_us", s.p99}, {"p999_us", s.p999}});
        plot.points.push_back({bytes, {s.typical, s.p99}});
      }
    }
    progress.step(round + 1, std::to_string(bytes) + " B");
  }
  progress.done();
  return finish(*job, a, rows, plot);
}

}  // namespace grex::perf
