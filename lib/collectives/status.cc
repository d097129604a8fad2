// SPDX-License-Identifier: Apache-2.0
// The status service: answers, asks, and its thread (status.h).
#include "collectives/status.h"

#include <grex/communicator.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string_view>

#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"

namespace grex::detail {

namespace {

constexpr const char* kSubsys = "comm";
constexpr const char* kReq = "grex/status/req";
constexpr int64_t kConnectMs = 3000;     // the listener's own connection, else the shared store is polled
constexpr int64_t kIdleWaitMs = 30'000;  // a blocked listen re-reads the counter this often (a requester may have died)

std::string go_key(uint64_t g) { return "grex/status/go/" + std::to_string(g); }
std::string ans_key(uint64_t g, const std::string& comm, int rank) {
  return "grex/status/ans/" + std::to_string(g) + "/" + comm + "/" + std::to_string(rank);
}

const std::string& host_name() {
  static const std::string name = [] {
    char h[256] = {};
    if (gethostname(h, sizeof h - 1) != 0) return std::string("?");
    return std::string(h);
  }();
  return name;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) continue;
    o += ch;
  }
  return o;
}

std::string call_text(const Recorder::Snapshot& s) {
  if (s.what == nullptr) return "";
  std::string t = s.what;
  auto add = [&t](std::string_view k, std::string_view v) {
    t.push_back(' ');
    t.append(k);
    t.append(v);
  };
  if (s.coll == 0) {  // point-to-point: the count is bytes
    add("", std::to_string(s.count));
    t.append(" B");
    if (s.peer >= 0) add("peer=", std::to_string(s.peer));
    if (s.root >= 0) add("from=", std::to_string(s.root));
    return t;
  }
  add("count=", std::to_string(s.count));
  if (s.dtype >= 0) add("", dtype_name(static_cast<DataType>(s.dtype)));
  if (s.op >= 0) add("", reduce_op_name(static_cast<ReduceOp>(s.op)));
  if (s.root >= 0) add("root=", std::to_string(s.root));
  return t;
}

std::string rank_list(const std::vector<int>& r) {
  std::string t = r.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < r.size(); ++i) t += (i > 0 ? ", " : "") + std::to_string(r[i]);
  return t;
}

std::mutex g_mu;
std::map<const Bootstrap*, std::weak_ptr<StatusService>>* g_services;  // never freed (threads may outlive main)

}  // namespace

std::string status_answer(const Recorder& rec, const std::string& comm, int rank, int size) {
  const Recorder::Snapshot s = rec.snapshot();
  std::string w = "[";
  for (size_t i = 0; i < s.waiting_on.size(); ++i) {
    if (i > 0) w.push_back(',');
    w.append(std::to_string(s.waiting_on[i]));
  }
  w += "]";
  const char* state = !s.any ? "none" : s.state == Recorder::kRunning ? "running" : s.state == Recorder::kFailed ? "failed" : "done";
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "{\"rank\":%d,\"size\":%d,\"comm\":\"%s\",\"host\":\"%s\",\"pid\":%d,\"op\":\"%s\",\"call\":\"%s\","
                "\"coll\":%llu,\"state\":\"%s\",\"peer\":%d,\"ms\":%.1f,\"waiting_on\":%s,\"colls_done\":%llu,"
                "\"last_coll\":\"%s\",\"last_coll_seq\":%llu}",
                rank, size, json_escape(comm).c_str(), json_escape(host_name()).c_str(), static_cast<int>(getpid()),
                s.what != nullptr ? s.what : "", json_escape(call_text(s)).c_str(),
                static_cast<unsigned long long>(s.coll), state, s.peer, s.ms, w.c_str(),
                static_cast<unsigned long long>(s.colls_done), s.coll_what != nullptr ? s.coll_what : "",
                static_cast<unsigned long long>(s.coll_seq));
  return buf;
}

std::string describe_peer(const RankStatus& s, uint64_t coll) {
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.0f ms", s.ms);
  if (!s.answered) return "not answering (stopped, frozen, or gone)";
  if (s.op.empty()) return "alive, not in the collective: no call on this communicator yet";
  if (s.running && s.coll > 0 && s.coll == coll) {
    std::string t = "alive, in this collective too";
    if (!s.waiting_on.empty()) t += ", waiting on " + rank_list(s.waiting_on);
    return t;
  }
  if (s.running && s.coll > 0)
    return "alive, in a different call: " + s.call + " (#" + std::to_string(s.coll) + ") for " + ms;
  std::string last = s.last_coll.empty() ? "no collective yet"
                                         : "its last collective " + s.last_coll + " #" + std::to_string(s.last_coll_seq) +
                                               (s.colls_done >= s.last_coll_seq ? " ended" : " failed");
  if (s.running) return "alive, not in the collective: in " + s.call + " for " + ms + "; " + last;
  return "alive, not in the collective: back in its application for " + std::string(ms) + "; " + last;
}

std::shared_ptr<StatusService> StatusService::join(const std::shared_ptr<Bootstrap>& bs, const std::string& comm,
                                                   int rank, int size, const Recorder* rec) {
  static const bool on = [] {
    int64_t v = 1;
    (void)config::env_int("GREX_STATUS", &v, 0, 1);
    return v != 0;
  }();
  if (!on || !bs) return nullptr;
  std::shared_ptr<StatusService> svc;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_services == nullptr) g_services = new std::map<const Bootstrap*, std::weak_ptr<StatusService>>();
    svc = (*g_services)[bs.get()].lock();
    if (!svc) {
      svc = std::make_shared<StatusService>(bs);
      (*g_services)[bs.get()] = svc;
    }
  }
  // The communicator's first rank lists it for grex-status (and marks it gone in leave()).
  int64_t listed = 0;
  if (rank == 0) {
    Store& st = bs->store();
    if (auto i = st.add("grex/status/comms", 1); i.ok() &&
        st.set("grex/status/comm/" + std::to_string(*i), std::to_string(size) + " " + comm).ok())
      listed = *i;
  }
  std::lock_guard<std::mutex> lock(svc->mu_);
  svc->members_.push_back(Member{comm, rank, size, rec, listed});
  return svc;
}

StatusService::StatusService(std::shared_ptr<Bootstrap> bs) : bs_(std::move(bs)) {
  (void)config::env_int("GREX_STATUS_POLL_MS", &poll_ms_, 1, 3'600'000);
  thread_ = std::thread([this] { run(); });
}

StatusService::~StatusService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  {
    std::lock_guard<std::mutex> lock(listen_mu_);
    if (listen_) listen_->interrupt();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_services != nullptr) {
    auto it = g_services->find(bs_.get());
    if (it != g_services->end() && it->second.expired()) g_services->erase(it);
  }
}

void StatusService::leave(const Recorder* rec) {
  int64_t listed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = members_.begin(); it != members_.end(); ++it)
      if (it->rec == rec) {
        listed = it->listed;
        members_.erase(it);
        break;
      }
  }
  if (listed > 0) (void)bs_->store().set("grex/status/gone/" + std::to_string(listed), "");
}

Store& StatusService::asker(int64_t connect_ms) {
  if (!ask_tried_) {  // once: a store that is gone is not waited for at every ask
    ask_tried_ = true;
    if (auto c = bs_->connect_again(connect_ms); c.ok()) ask_conn_ = std::move(*c);
  }
  return ask_conn_ ? static_cast<Store&>(*ask_conn_) : bs_->store();
}

Result<uint64_t> StatusService::request(int64_t connect_ms, const std::function<void(uint64_t)>& before_go) {
  std::lock_guard<std::mutex> lock(ask_mu_);
  Store& st = asker(connect_ms);
  const int64_t g = GREX_TRY(st.add(kReq, 1));
  // Queued before the key that wakes this process's thread too: woken, it must find the request.
  if (before_go) before_go(static_cast<uint64_t>(g));
  GREX_TRY(st.set(go_key(static_cast<uint64_t>(g)), ""));
  return static_cast<uint64_t>(g);
}

void StatusService::forget(Store& st, const std::string& comm, const std::vector<int>& peers, uint64_t gen) {
  // The answers go, this rank's own too; the announcement stays (a few bytes):
  // a listener that has not seen it yet waits for that very key.
  std::vector<std::string> keys;
  for (int p : peers) keys.push_back(ans_key(gen, comm, p));
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Member& m : members_)
      if (m.comm == comm) keys.push_back(ans_key(gen, comm, m.rank));
  }
  (void)st.erase(keys);
}

void StatusService::collect(Store& st, const std::string& comm, const std::vector<int>& peers, uint64_t gen,
                            std::vector<RankStatus>* out) {
  std::vector<std::string> keys;
  std::vector<size_t> which;
  for (size_t i = 0; i < peers.size(); ++i)
    if (!(*out)[i].answered) {
      keys.push_back(ans_key(gen, comm, peers[i]));
      which.push_back(i);
    }
  if (keys.empty()) return;
  auto there = st.check(keys);
  if (!there.ok()) return;
  for (size_t k = 0; k < keys.size(); ++k) {
    if (!(*there)[k]) continue;
    if (auto v = st.get(keys[k], 0); v.ok()) (*out)[which[k]] = parse_rank_status(*v, peers[which[k]]);
  }
}

std::vector<RankStatus> StatusService::ask(const std::string& comm, const std::vector<int>& peers, int64_t budget_ms) {
  std::vector<RankStatus> out(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) out[i].rank = peers[i];
  const Deadline deadline = Deadline::after_ms(budget_ms);
  auto g = request(budget_ms);
  if (!g.ok()) return out;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(ask_mu_);
      collect(asker(budget_ms), comm, peers, *g, &out);
    }
    if (std::all_of(out.begin(), out.end(), [](const RankStatus& s) { return s.answered; }) || deadline.expired()) {
      std::lock_guard<std::mutex> lock(ask_mu_);
      forget(asker(budget_ms), comm, peers, *g);
      return out;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool StatusService::ask_later(const std::string& comm, std::vector<int> peers, int64_t budget_ms,
                              std::function<void(std::vector<RankStatus>)> done) {
  const uint64_t due = now_ns() + static_cast<uint64_t>(budget_ms) * 1'000'000;
  bool queued = false;
  (void)request(budget_ms, [&](uint64_t gen) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(Pending{comm, std::move(peers), gen, due, std::move(done)});
    queued = true;
  });
  cv_.notify_all();
  // Queued and then not announced (the store failed): the thread settles it at its deadline, with no answers.
  return queued;
}

void StatusService::answer(Store& st, uint64_t gen) {
  std::vector<std::pair<std::string, std::string>> sets;
  {
    std::lock_guard<std::mutex> lock(mu_);  // the recorders live while their members are listed
    for (const Member& m : members_) sets.emplace_back(ans_key(gen, m.comm, m.rank), status_answer(*m.rec, m.comm, m.rank, m.size));
  }
  for (const auto& [k, v] : sets) (void)st.set(k, v);
  GREX_DEBUG(kSubsys, "status: answered request %llu", static_cast<unsigned long long>(gen));
}

void StatusService::settle(Store& st, bool all_due) {
  std::deque<Pending> mine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mine.swap(pending_);
  }
  std::deque<Pending> keep;
  for (Pending& p : mine) {
    std::vector<RankStatus> out(p.peers.size());
    for (size_t i = 0; i < p.peers.size(); ++i) out[i].rank = p.peers[i];
    collect(st, p.comm, p.peers, p.gen, &out);
    const bool all = std::all_of(out.begin(), out.end(), [](const RankStatus& s) { return s.answered; });
    if (all || all_due || now_ns() >= p.deadline_ns) {
      forget(st, p.comm, p.peers, p.gen);
      p.done(std::move(out));
    } else {
      keep.push_back(std::move(p));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (Pending& p : keep) pending_.push_front(std::move(p));
}

void StatusService::run() {
  // A connection of its own where the store is grex's (made here, off the
  // communicator's creation path); otherwise the shared store, polled. The
  // destructor may wait for this connect: a few seconds at most.
  if (auto c = bs_->connect_again(std::min<int64_t>(bs_->timeout_ms(), kConnectMs)); c.ok()) {
    std::lock_guard<std::mutex> lock(listen_mu_);  // the destructor interrupts it under this lock
    {
      std::lock_guard<std::mutex> state(mu_);
      if (stop_) return;
    }
    listen_ = std::move(*c);
  }
  Store& st = listen_ ? static_cast<Store&>(*listen_) : bs_->store();
  auto first = st.add(kReq, 0);
  if (!first.ok()) return;
  uint64_t last = *first > 0 ? static_cast<uint64_t>(*first) - 1 : 0;  // answer the newest request once more
  for (;;) {
    bool busy = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) break;
      busy = !pending_.empty();
      if (!listen_) cv_.wait_for(lock, std::chrono::milliseconds(busy ? 10 : poll_ms_), [&] {
        return stop_ || (!busy && !pending_.empty());
      });
      if (stop_) break;
    }
    // Blocking: only requests already announced are answered, so a request
    // this process makes itself (ask_later: queued between its number and
    // its announcement) always wakes this thread. A number never announced
    // (its asker died in between) is passed over after an idle wait.
    bool announced_only = false;
    if (listen_) {
      auto r = listen_->get(go_key(last + 1), busy ? 10 : kIdleWaitMs);
      if (!r.ok() && r.error().code() != Errc::kTimeout) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!stop_) GREX_INFO(kSubsys, "status: the store connection ended (%s); this rank answers no more",
                               r.error().message().c_str());
        break;
      }
      announced_only = r.ok() || busy;
    }
    if (auto g = st.add(kReq, 0); g.ok() && static_cast<uint64_t>(*g) > last) {
      // Requests left unanswered while this rank was busy: the newest few (their askers may be gone).
      const uint64_t newest = static_cast<uint64_t>(*g);
      const uint64_t from = std::max(last + 1, newest > 16 ? newest - 15 : 1);
      uint64_t upto = newest;
      if (announced_only) {
        std::vector<std::string> keys;
        for (uint64_t k = from; k <= newest; ++k) keys.push_back(go_key(k));
        auto there = st.check(keys);
        upto = from - 1;
        while (there.ok() && upto < newest && (*there)[upto + 1 - from]) ++upto;
      }
      for (uint64_t k = from; k <= upto; ++k) answer(st, k);
      if (upto >= from) last = upto;
      else if (from > last + 1) last = from - 1;  // the stale ones skipped
    }
    settle(st, false);
  }
  settle(st, true);  // whatever still waits is told what came
}

}  // namespace grex::detail
