// SPDX-License-Identifier: Apache-2.0
// How a call ends: the broken state, the call's signature, and after a
// failure the diagnosis (which rank disagrees, which one to blame) and the
// word to every peer.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "collectives/comm_impl.h"
#include "core/log.h"

namespace grex {
namespace {

constexpr const char* kSubsys = "comm";

}  // namespace

Result<void> Communicator::Impl::check_usable(const char* what) const {
  if (broken)
    return Error(broken->code(), std::string(what) + ": communicator unusable after an earlier error: " +
                                     broken->message())
        .rank(rank);
  return ok();
}

void Communicator::Impl::begin(const detail::CallSig& s) noexcept {
  // A few multiply-xorshift rounds over the fields (every rank computes the
  // same bits; the name enters as its first 8 bytes, distinct for every
  // collective). Cheap: this runs on every call, 8-byte allreduces included.
  uint64_t name = 0;
  for (size_t i = 0; i < 8 && s.what[i] != 0; ++i) name |= static_cast<uint64_t>(static_cast<uint8_t>(s.what[i])) << (8 * i);
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t v : {name, s.count, static_cast<uint64_t>(s.dtype), static_cast<uint64_t>(s.op),
                     static_cast<uint64_t>(s.root)}) {
    h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  sig = static_cast<uint32_t>(h ^ (h >> 32));
  ctx.call = s;
  ++ctx.ncoll;
  if (recorder) recorder->start(s.what, ctx.ncoll, s.count, s.dtype, s.op, s.root, -1, engine->posted_bytes());
}

std::string detail::describe(const CallSig& c) {
  std::string t = c.what;
  if (c.count_name != nullptr) t += std::string(" ") + c.count_name + "=" + std::to_string(c.count);
  if (c.dtype >= 0) t += " " + std::string(dtype_name(static_cast<DataType>(c.dtype)));
  if (c.op >= 0) t += " " + std::string(reduce_op_name(static_cast<ReduceOp>(c.op)));
  if (c.root >= 0) t += " root=" + std::to_string(c.root);
  return t;
}

Error detail::Context::mismatch(int peer, const CallSig& theirs) const {
  return Error(Errc::kMismatch, "ranks disagree on collective #" + std::to_string(ncoll) + ": rank " +
                                    std::to_string(peer) + " called " + describe(theirs) + ", rank " +
                                    std::to_string(rank) + " called " + describe(call))
      .rank(rank)
      .peer(peer)
      .hint("every rank must call the same collectives, in the same order, with the same count, dtype, op and root");
}

Error Communicator::Impl::diagnose(Error e) {
  const uint64_t ncoll = ctx.ncoll;
  if (ncoll == 0 || size < 2) return e;
  const std::string sig_text = detail::describe(ctx.call);
  const std::string key = opts.name + "/sig/" + std::to_string(ncoll) + "/";
  Store& st = bootstrap->store();
  if (!st.set(key + std::to_string(rank), sig_text)) return e;
  // At most 1 s in all (a quarter of the timeout where that is shorter): the
  // caller waits for this error, and an absent rank never writes its call.
  const int64_t budget_ms = std::min<int64_t>(1000, std::max<int64_t>(1, opts.timeout_ms / 4));
  const Deadline deadline = Deadline::after_ms(budget_ms);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const int64_t left = std::max<int64_t>(1, deadline.remaining_ms());
    auto theirs = st.get(key + std::to_string(p), left);
    if (!theirs || *theirs == sig_text) continue;  // not there (slower, elsewhere) or the same call
    return Error(Errc::kMismatch, "ranks disagree on collective #" + std::to_string(ncoll) + ": rank " +
                                      std::to_string(p) + " called " + *theirs + ", rank " + std::to_string(rank) +
                                      " called " + sig_text)
        .rank(rank)
        .peer(p)
        .hint("every rank must call the same collectives, in the same order, with the same count, dtype, op and root");
  }
  return e;
}

Error Communicator::Impl::await_verdict(Error e) {
  const int p = e.peer_rank();
  if (p < 0 || p >= size || p == rank || !endpoints[static_cast<size_t>(p)]) return e;
  // The awaited rank may itself be waiting on another (one a whole dead host
  // away) and give up moments later, naming it: wait a little for that word.
  // Half of the time a failed call may take past its timeout (diagnose() has the other half).
  const int64_t budget_ms = std::min<int64_t>(1000, std::max<int64_t>(1, opts.timeout_ms / 4));
  const Deadline deadline = Deadline::after_ms(budget_ms);
  while (!deadline.expired()) {
    // Any peer's announcement counts (progress() reports it as kPeerFailed naming the culprit).
    if (auto v = engine->progress(); !v && v.error().code() == Errc::kPeerFailed) return std::move(v).error();
    if (auto v = engine->check_peer(p); !v) return std::move(v).error();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return e;
}

Error Communicator::Impl::explain(Error e) {
  if (!status || size < 2) return e;
  std::vector<int> peers;
  for (int p = 0; p < size; ++p)
    if (p != rank) peers.push_back(p);
  // A quarter of the timeout, from half a second (a store that is polled,
  // torch's, answers within GREX_STATUS_POLL_MS) to one: every rank's status
  // thread answers at once; only a rank that cannot answer costs the whole of it.
  const int64_t budget_ms = std::clamp<int64_t>(opts.timeout_ms / 4, 500, 1000);
  const std::vector<RankStatus> all = status->ask(opts.name, peers, budget_ms);
  const uint64_t coll = ctx.ncoll;
  // The awaited rank first, then every rank not in this collective (behind, elsewhere, or silent).
  std::vector<const RankStatus*> named;
  for (const RankStatus& a : all)
    if (a.rank == e.peer_rank()) named.push_back(&a);
  for (const RankStatus& a : all)
    if (a.rank != e.peer_rank() && !(a.answered && a.running && a.coll == coll)) named.push_back(&a);
  if (named.empty()) return e;
  std::string more;
  for (size_t i = 0; i < named.size(); ++i) {
    if (i == 8) {
      more += "; and " + std::to_string(named.size() - i) + " more ranks";
      break;
    }
    more += "; rank " + std::to_string(named[i]->rank) + " is " + detail::describe_peer(*named[i], coll);
  }
  Error out = Error(e.code(), e.cause() + more).rank(e.rank_or(rank)).hint(e.hint_text());
  if (e.peer_rank() >= 0) out.peer(e.peer_rank());
  if (!e.device_name().empty()) out.device(e.device_name());
  return out;
}

bool Communicator::Impl::long_wait(const char* what, int64_t waited_ms, const std::vector<int>& peers) {
  if (!status || !recorder || peers.empty()) return false;
  const detail::Recorder::Snapshot s = recorder->snapshot();
  const std::string call = s.what == nullptr ? std::string(what)
                                             : std::string(s.what) + (s.coll > 0 ? " #" + std::to_string(s.coll) : "");
  const std::string part = what;
  const uint64_t coll = s.coll;
  const int64_t timeout = opts.timeout_ms;
  // The line comes from the service's thread once the awaited ranks answered
  // (or a second passed): this wait goes on meanwhile.
  return status->ask_later(opts.name, peers, 1000, [call, part, coll, waited_ms, timeout](std::vector<RankStatus> a) {
    std::string list, who;
    for (const RankStatus& r : a) {
      list += (list.empty() ? "" : ", ") + std::to_string(r.rank);
      who += (who.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r.rank) + " is " +
             detail::describe_peer(r, coll);
    }
    GREX_WARN(kSubsys, "%s: %s has waited %lld ms for %s %s (GREX_WARN_AFTER_MS): %s; still waiting, up to %lld ms",
              call.c_str(), part.c_str(), static_cast<long long>(waited_ms), a.size() == 1 ? "rank" : "ranks",
              list.c_str(), who.c_str(), static_cast<long long>(timeout));
  });
}

Result<void> Communicator::Impl::finish(Result<void> r, const char* what) {
  if (!r) {
    Error raw = std::move(r).error();
    // Tell every peer which rank is to blame, so they stop waiting and name
    // it. A timeout blames the rank it waited on. Waiting on a rank of
    // another host, at once: this rank's neighbours, which may be waiting on
    // it, then name that rank (on the far side of a host whose ranks all
    // died, a dead one) within their own timeout. Waiting on a rank of this
    // host, after a moment for that rank's own word (await_verdict): it is
    // likely waiting on another host itself.
    bool told = false;
    auto tell = [&](const Error& e) {
      if (told) return;
      told = true;
      const bool blames_peer = e.code() == Errc::kPeerFailed || e.code() == Errc::kTimeout;
      const int culprit = blames_peer && e.peer_rank() >= 0 ? e.peer_rank() : rank;
      for (auto& ep : endpoints)
        if (ep) ep->announce_abort(culprit);
    };
    if (raw.code() == Errc::kTimeout) {
      const int p = raw.peer_rank();
      if (engine->is_remote(p)) tell(raw);
      raw = await_verdict(std::move(raw));
    }
    if (raw.code() == Errc::kTimeout) raw = diagnose(std::move(raw));
    if (raw.code() == Errc::kTimeout) raw = explain(std::move(raw));
    Error e = std::move(raw).context(what);
    GREX_WARN(kSubsys, "%s", e.message().c_str());
    if (recorder) {
      recorder->end(false, engine->posted_bytes());
      if (const std::string& dir = detail::Recorder::dump_dir(); !dir.empty()) {
        const std::string path = recorder->dump(dir);
        if (path.empty())
          GREX_WARN(kSubsys, "GREX_TRACE_DUMP: cannot write to %s: %s", dir.c_str(), std::strerror(errno));
        else
          GREX_WARN(kSubsys, "flight recorder written to %s", path.c_str());
      }
    }
    tell(e);
    broken = e;
    return e;
  }
  bufs->release_retired();
  collectives_done.add();
  if (recorder) recorder->end(true, engine->posted_bytes());
  return ok();
}

}  // namespace grex
