// SPDX-License-Identifier: Apache-2.0
// Engine: request tracking, polling, failure and timeout reporting.
#include "collectives/engine.h"

#include <sched.h>
#include <time.h>

#include <algorithm>

#include <set>
#include <string>

#include "collectives/recorder.h"
#include "core/log.h"

namespace grex::detail {

Engine::Engine(Device* dev, std::vector<std::unique_ptr<Endpoint>>* endpoints, int rank)
    : dev_(dev), eps_(endpoints), rank_(rank), recs_(kTrack), pending_per_peer_(endpoints->size(), 0) {}

Result<OpId> Engine::track(int peer, bool is_recv) {
  // Background receives stay posted for long: skip their slots.
  for (size_t tries = 0; recs_[next_ % kTrack].pending && recs_[next_ % kTrack].background && tries < kTrack; ++tries)
    ++next_;
  OpId id = next_;
  Record& r = recs_[id % kTrack];
  if (r.pending)
    return Error(Errc::kInternal, "more than " + std::to_string(kTrack) + " requests in flight").rank(rank_);
  r = Record{id, peer, true, is_recv, false, 0};
  ++next_;
  ++pending_;
  ++pending_per_peer_[static_cast<size_t>(peer)];
  return id;
}

static Error post_error(Errc e, int rank, int peer, const Endpoint* ep) {
  if (e == Errc::kPeerFailed)
    return Error(Errc::kPeerFailed, (ep != nullptr ? ep->describe_peer() : "peer") + " has failed")
        .rank(rank)
        .peer(peer)
        .hint("look at rank " + std::to_string(peer) + "'s output for its own error");
  return Error(e, "transport refused the request").rank(rank).peer(peer);
}

void Engine::untrack(OpId id) noexcept {
  Record& r = recs_[id % kTrack];
  r.pending = false;
  --pending_;
  if (!r.background) --pending_per_peer_[static_cast<size_t>(r.peer)];
}

template <class Req, class Post>
Result<OpId> Engine::post(int peer, bool is_recv, Req req, Post post_fn) {
  OpId id = 0;
  GREX_TRY(post_batch(peer, is_recv, std::span<Req>(&req, 1), &id, post_fn));
  return id;
}

template <class Req, class Post>
Result<void> Engine::post_batch(int peer, bool is_recv, std::span<Req> reqs, OpId* ids, Post post_fn) {
  Endpoint* ep = (*eps_)[static_cast<size_t>(peer)].get();
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto id = track(peer, is_recv);
    if (!id) {
      for (size_t j = 0; j < i; ++j) untrack(ids[j]);
      return std::move(id).error();
    }
    ids[i] = *id;
    reqs[i].context = *id;
  }
  size_t done = 0;
  while (done < reqs.size()) {
    PostResult pr = post_fn(ep, std::span<const Req>(reqs.data() + done, reqs.size() - done));
    done += pr.count;
    if (done == reqs.size()) break;
    if (pr.error != Errc::kOk) {
      for (size_t j = done; j < reqs.size(); ++j) untrack(ids[j]);
      return post_error(pr.error, rank_, peer, ep);
    }
    GREX_TRY(progress());  // queue full: make room
  }
  return ok();
}

Result<void> Engine::send_batch(int peer, std::span<SendRequest> reqs, OpId* ids) {
  GREX_TRY(post_batch(peer, false, reqs, ids,
                      [](Endpoint* ep, std::span<const SendRequest> r) { return ep->post_send(r); }));
  uint64_t bytes = 0;
  for (const SendRequest& r : reqs) bytes += r.length;
  count_sent(peer, bytes);
  return ok();
}

Result<void> Engine::recv_batch(int peer, std::span<RecvRequest> reqs, OpId* ids) {
  return post_batch(peer, true, reqs, ids,
                    [](Endpoint* ep, std::span<const RecvRequest> r) { return ep->post_recv(r); });
}

Result<OpId> Engine::send(int peer, const MemoryRegion* mr, uint64_t offset, uint64_t length, uint64_t tag) {
  auto id = post(peer, false, SendRequest{mr, offset, length, tag, 0},
                 [](Endpoint* ep, std::span<const SendRequest> r) { return ep->post_send(r); });
  if (id) count_sent(peer, length);
  return id;
}

Result<OpId> Engine::recv(int peer, const MemoryRegion* mr, uint64_t offset, uint64_t length, uint64_t tag) {
  return post(peer, true, RecvRequest{mr, offset, length, tag, 0},
              [](Endpoint* ep, std::span<const RecvRequest> r) { return ep->post_recv(r); });
}

void Engine::make_background(OpId id) noexcept {
  Record& r = recs_[id % kTrack];
  if (r.id != id || !r.pending || r.background) return;  // finished already (shm completes eager sends at once)
  r.background = true;
  --pending_per_peer_[static_cast<size_t>(r.peer)];
}

Result<OpId> Engine::recv_background(int peer, const MemoryRegion* mr, uint64_t offset, uint64_t length,
                                     uint64_t tag) {
  auto id = recv(peer, mr, offset, length, tag);
  if (id) make_background(*id);
  return id;
}

Result<OpId> Engine::send_background(int peer, const MemoryRegion* mr, uint64_t offset, uint64_t length,
                                     uint64_t tag) {
  auto id = send(peer, mr, offset, length, tag);
  if (id) make_background(*id);
  return id;
}

Result<OpId> Engine::read(int peer, const MemoryRegion* mr, uint64_t offset, uint64_t length,
                          const RemoteRegion& remote, uint64_t remote_offset) {
  return post(peer, true, ReadRequest{mr, offset, length, remote, remote_offset, 0},
              [](Endpoint* ep, std::span<const ReadRequest> r) { return ep->post_read(r); });
}

Result<OpId> Engine::write(int peer, const MemoryRegion* mr, uint64_t offset, uint64_t length,
                           const RemoteRegion& remote, uint64_t remote_offset, bool cold) {
  auto id = post(peer, false, WriteRequest{mr, offset, length, remote, remote_offset, 0, false, 0, cold},
                 [](Endpoint* ep, std::span<const WriteRequest> r) { return ep->post_write(r); });
  if (id) count_sent(peer, length);
  return id;
}

bool Engine::done(OpId id) const noexcept {
  const Record& r = recs_[id % kTrack];
  return r.id != id || !r.pending;
}

uint64_t Engine::bytes(OpId id) const noexcept {
  const Record& r = recs_[id % kTrack];
  return r.id == id ? r.bytes : 0;
}

Error Engine::peer_error(int peer, const Endpoint* ep) const {
  int culprit = ep != nullptr ? ep->peer_abort_culprit() : -1;
  if (culprit == rank_) {  // it timed out waiting on this rank, which is waiting too
    std::string who = ep != nullptr ? ep->describe_peer() : "rank " + std::to_string(peer);
    return Error(Errc::kPeerFailed, who + " gave up waiting on this rank")
        .rank(rank_)
        .peer(peer)
        .hint("this rank was itself waiting: the rank it waited on is the one to look at (its log line names it)");
  }
  if (culprit >= 0 && culprit != peer) {
    const Endpoint* cep = static_cast<size_t>(culprit) < eps_->size() ? (*eps_)[static_cast<size_t>(culprit)].get()
                                                                      : nullptr;
    std::string who = cep != nullptr ? cep->describe_peer() : "rank " + std::to_string(culprit);
    return Error(Errc::kPeerFailed, who + " failed (reported by rank " + std::to_string(peer) + ")")
        .rank(rank_)
        .peer(culprit)
        .hint("look at rank " + std::to_string(culprit) + "'s output for its own error");
  }
  std::string who = ep != nullptr ? ep->describe_peer() : "rank " + std::to_string(peer);
  return Error(Errc::kPeerFailed, who + (culprit == peer ? " aborted" : " exited or failed"))
      .rank(rank_)
      .peer(peer)
      .hint("look at rank " + std::to_string(peer) + "'s output for its own error");
}

Result<void> Engine::check_peers() const {
  // A peer that announced an abort fails the collective wherever we wait, so
  // every survivor names the rank that died first. A peer that merely exited
  // matters only if we still wait on it (it may have finished normally).
  for (const auto& ep : *eps_) {
    if (!ep) continue;
    // A peer that gave up waiting on this rank is no verdict: this rank is
    // waiting on someone itself, and its own timeout will name that one.
    const int culprit = ep->peer_abort_culprit();
    if (culprit >= 0 && culprit != rank_) return peer_error(ep->peer(), ep.get());
    if (ep->peer_failed() && pending_per_peer_[static_cast<size_t>(ep->peer())] > 0)
      return peer_error(ep->peer(), ep.get());
  }
  return ok();
}

Result<void> Engine::check_peer(int peer) const {
  const Endpoint* ep = (*eps_)[static_cast<size_t>(peer)].get();
  if (ep != nullptr && (ep->peer_failed() || (ep->peer_abort_culprit() >= 0 && ep->peer_abort_culprit() != rank_)))
    return peer_error(peer, ep);
  return ok();
}

Error Engine::failure(const Completion& c) const {
  const Endpoint* ep = c.peer >= 0 && static_cast<size_t>(c.peer) < eps_->size()
                           ? (*eps_)[static_cast<size_t>(c.peer)].get()
                           : nullptr;
  // A peer that gave up tells us whom it blames: name that rank, not the
  // symptom we saw on this connection.
  if (c.status == Status::kPeerGone || (ep != nullptr && ep->peer_abort_culprit() >= 0))
    return peer_error(c.peer, ep);
  std::string who = ep != nullptr ? ep->describe_peer() : "rank " + std::to_string(c.peer);
  std::string what = c.op == Op::kRecv    ? "receive from "
                     : c.op == Op::kRead  ? "read from "
                     : c.op == Op::kWrite ? "write to "
                                          : "send to ";
  Errc code = c.status == Status::kPeerGone ? Errc::kPeerFailed
              : c.status == Status::kTruncated ? Errc::kMismatch
                                               : Errc::kInternal;
  std::string cause = what + who + " failed: " + std::string(status_name(c.status));
  if (c.status == Status::kPeerGone) cause = who + " exited or failed";
  Error e(code, cause);
  e.rank(rank_).peer(c.peer);
  if (c.status == Status::kTruncated)
    e.hint("ranks disagree on the message size (count or dtype differ between ranks?)");
  else if (c.status == Status::kPeerGone)
    e.hint("look at rank " + std::to_string(c.peer) + "'s output for its own error");
  return e;
}

size_t Engine::take_completions(std::optional<Error>* failed) {
  // A member buffer: a local Completion[64] would be value-initialised
  // (2.5 KB of memset) on every poll.
  std::span<Completion> cs(cq_buf_);
  size_t n = dev_->poll(cs);
  for (size_t i = 0; i < n; ++i) {
    const Completion& c = cs[i];
    if (c.op == Op::kRemoteWrite) continue;  // not used by these collectives
    Record& r = recs_[c.context % kTrack];
    if (r.id != c.context || !r.pending) continue;
    r.pending = false;
    r.bytes = c.bytes;
    --pending_;
    if (r.background) continue;  // its owner reads the outcome from its buffer
    --pending_per_peer_[static_cast<size_t>(r.peer)];
    if (c.status != Status::kSuccess && !*failed) *failed = failure(c);
  }
  return n;
}

void Engine::poll_quietly() {
  std::optional<Error> failed;
  take_completions(&failed);
  if (failed && !deferred_) deferred_ = std::move(failed);
}

Result<void> Engine::progress() {
  if (deferred_) {  // a failure poll_quietly() took: the next wait reports it
    Error e = std::move(*deferred_);
    deferred_.reset();
    return e;
  }
  std::optional<Error> failed;
  const size_t n = take_completions(&failed);
  if (failed) return std::move(*failed);
  if (n > 0) {
    idle_polls_ = 0;
  } else if (++idle_polls_ > (adaptive_ ? kAdaptiveSpinPolls : kSpinPolls)) {
    if (adaptive_ && idle_polls_ > kYieldPolls) {
      // Nap, growing from 1 us to kMaxNapNs while nothing arrives.
      long ns = std::min<long>(kMaxNapNs, 1000L << std::min<uint32_t>((idle_polls_ - kYieldPolls) / 64, 6));
      if (!dev_->wait(static_cast<uint64_t>(ns) * 64)) {  // a completion channel wakes us early
        timespec ts{0, ns};
        nanosleep(&ts, nullptr);
      }
    } else {
      sched_yield();  // let the rank we wait for run
    }
  }
  // Peer checks cost virtual calls per endpoint: every 32nd empty poll is
  // soon enough (a dead peer is noticed within microseconds either way).
  if (n == 0 && (idle_polls_ & 31) == 1) GREX_TRY(check_peers());
  return ok();
}

std::string Engine::awaited(int* blame) const {
  std::set<int> peers;
  int first = -1;  // the peer to blame: one whose message has not come (a send waits on the receiver)
  for (const Record& r : recs_)
    if (r.pending && !r.background) {
      peers.insert(r.peer);
      if (r.is_recv && (first < 0 || r.peer < first)) first = r.peer;
    }
  if (first < 0 && !peers.empty()) first = *peers.begin();
  if (blame != nullptr) *blame = first;
  std::string list = peers.size() == 1 ? "rank " : "ranks ";
  for (int p : peers) list += (p == *peers.begin() ? "" : ", ") + std::to_string(p);
  return peers.empty() ? "rank ?" : list;
}

Error Engine::timeout_error(const char* what) const {
  int awaited_rank = -1;
  const std::string list = awaited(&awaited_rank);
  Error e = Error(Errc::kTimeout, std::string(what) + " timed out after " + std::to_string(timeout_ms_) +
                                      " ms waiting on " + list)
                .rank(rank_)
                .hint("a rank is slower, stuck, or called a different collective; raise GREX_TIMEOUT_MS if it is just slow");
  // The first awaited rank is the one peers are told to blame (Impl::finish).
  if (awaited_rank >= 0) e.peer(awaited_rank);
  return e;
}

Result<void> Engine::wait(OpId id, const Deadline& deadline, const char* what) {
  return wait_all({&id, 1}, deadline, what);
}

std::vector<int> Engine::awaited_list(int peer) const {
  if (peer >= 0) return {peer};
  std::set<int> peers;
  for (const Record& r : recs_)
    if (r.pending && !r.background) peers.insert(r.peer);
  return {peers.begin(), peers.end()};
}

void Engine::wait_begins() noexcept {
  if (recorder_ != nullptr) recorder_->settle();
}

void Engine::long_wait_ended() noexcept {
  if (recorder_ != nullptr) recorder_->wait_ended();
}

void Engine::warn_if_long(uint64_t t0, bool* warned, const char* what, int peer) {
  constexpr uint64_t kPublishAfterNs = 1'000'000, kRepublishNs = 20'000'000;
  wait_begins();  // any wait loop calls this soon after it began to wait
  const uint64_t now = now_ns();
  const uint64_t waited = now - t0;
  // A wait past a millisecond tells the recorder whom it waits for (the job
  // status reads it), again every 20 ms as the awaited set shrinks.
  if (recorder_ != nullptr && waited >= kPublishAfterNs && now - published_ns_ >= kRepublishNs) {
    published_ns_ = now;
    recorder_->waiting(awaited_list(peer), waited);
  }
  if (*warned || warn_after_ms_ <= 0 || waited < static_cast<uint64_t>(warn_after_ms_) * 1'000'000) return;
  // Once per wait: whom this rank still waits for, long before the timeout names them.
  *warned = true;
  const std::vector<int> peers = awaited_list(peer);
  if (long_wait_ && long_wait_(what, warn_after_ms_, peers)) return;
  std::string list = peers.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < peers.size(); ++i) list += (i > 0 ? ", " : "") + std::to_string(peers[i]);
  GREX_WARN("comm", "%s has waited %lld ms for %s (GREX_WARN_AFTER_MS); still waiting, up to %lld ms", what,
            static_cast<long long>(warn_after_ms_), peers.empty() ? "rank ?" : list.c_str(),
            static_cast<long long>(timeout_ms_));
}

Result<void> Engine::wait_all(std::span<const OpId> ids, const Deadline& deadline, const char* what) {
  wait_begins();  // the sends are posted: the recorder's work overlaps the peers'
  uint64_t t0 = now_ns();
  size_t spins = 0;
  bool warned = false;
  for (;;) {
    bool all = true;
    for (OpId id : ids)
      if (!done(id)) {
        all = false;
        break;
      }
    if (all) break;
    GREX_TRY(progress());
    if ((++spins & 255) == 0) {
      warn_if_long(t0, &warned, what);
      if (deadline.expired()) {
        wait_ns_.add(now_ns() - t0);
        return timeout_error(what);
      }
    }
  }
  wait_ns_.add(now_ns() - t0);
  if (spins >= 256) long_wait_ended();
  return ok();
}

}  // namespace grex::detail
