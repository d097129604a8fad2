// SPDX-License-Identifier: Apache-2.0
// Deadline allreduce (issue 29, AllreduceOptions::deadline_ms): the
// reduction over the ranks that entered the call in time, the same on every
// rank, and a late rank's vector dropped or carried into its next call (the
// "backup workers" of synchronous SGD).
//
// Which ranks are in time is decided through the bootstrap store, whose
// add() is atomic: a 64-bit word per 62 ranks, rank r adds bit r % 62 of
// word r / 62 as it enters. Bit 62 closes a word. The first rank whose
// deadline passes while some bit is missing takes the call's close ticket
// (add returns 1 to one rank only), adds bit 62 to every word and publishes
// the bits each add returned: exactly the ranks whose own add came first. A
// rank whose add returns bit 62 knows it is late; one that sees every bit
// without bit 62 knows every rank is in time (a closer then finds the same).
//
// The contributors reduce among themselves (a ring on their group view; the
// hierarchical allreduce across hosts when every rank is in time). The
// lowest one then posts the result to each late rank as a background send
// from a copy, and goes on: a late rank receives it whenever it enters. The
// communicator's background poll (WorkQueue::kick) drives those sends
// between calls, where the driver needs the sender's polls (dpdk).
#include <time.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "collectives/algorithm.h"
#include "collectives/comm_impl.h"
#include "collectives/jobs.h"
#include "collectives/reduce.h"

namespace grex {

using detail::bad_arg;
using detail::CollArgs;

namespace {

constexpr int kPerWord = 62;
constexpr int64_t kClosed = int64_t{1} << 62;
constexpr uint64_t kDeliveryPhase = uint64_t{0xF} << 16;  // the result for late ranks: phase 15 of the call's tags
// Results on their way at once, at most: sends (each holds one of the
// engine's 4096 tracking slots) and bytes of copies. Past either, the next
// call first waits for the oldest result to arrive.
constexpr size_t kMaxDeliverySends = 1024;
constexpr size_t kMaxDeliveryBytes = size_t{1} << 30;

int64_t word_mask(int size, int word) {
  const int n = std::min(kPerWord, size - word * kPerWord);
  return (int64_t{1} << n) - 1;
}

std::string encode(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

Result<std::vector<int>> decode(const std::string& s, int size) {
  std::vector<int> out;
  size_t at = 0;
  while (at < s.size()) {
    size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    int r = -1;
    try {
      r = std::stoi(s.substr(at, end - at));
    } catch (...) {
    }
    if (r < 0 || r >= size || (!out.empty() && r <= out.back()))
      return Error(Errc::kProtocol, "deadline allreduce: malformed contributor list '" + s + "' in the store");
    out.push_back(r);
    at = end + 1;
  }
  if (out.empty()) return Error(Errc::kProtocol, "deadline allreduce: empty contributor list in the store");
  return out;
}

// Which ranks contribute to call `base`; *late: this rank is not one of them.
Result<std::vector<int>> decide(Communicator::Impl& c, const std::string& base, int64_t deadline_ms, bool* late) {
  Store& st = c.bootstrap->store();
  const int words = (c.size + kPerWord - 1) / kPerWord;
  auto word_key = [&](int i) { return base + "w" + std::to_string(i); };
  const int mine = c.rank / kPerWord;
  const int64_t entered = GREX_TRY(st.add(word_key(mine), int64_t{1} << (c.rank % kPerWord)));
  *late = (entered & kClosed) != 0;
  auto published = [&]() -> Result<std::vector<int>> {
    return decode(GREX_TRY(st.get(base + "set", c.opts.timeout_ms)), c.size);
  };
  if (*late) return published();
  const Deadline deadline = Deadline::after_ms(deadline_ms);
  for (uint32_t polls = 0;; ++polls) {
    bool all = true;
    for (int i = 0; i < words; ++i) {
      const int64_t v = polls == 0 && i == mine ? entered : GREX_TRY(st.add(word_key(i), 0));
      if ((v & kClosed) != 0) return published();
      all &= (v & ~kClosed) == word_mask(c.size, i);
    }
    if (all) {
      std::vector<int> every(static_cast<size_t>(c.size));
      for (int r = 0; r < c.size; ++r) every[static_cast<size_t>(r)] = r;
      return every;
    }
    if (deadline.expired()) {
      if (GREX_TRY(st.add(base + "close", 1)) != 1) return published();
      std::vector<int> in_time;
      for (int i = 0; i < words; ++i) {
        const int64_t before = GREX_TRY(st.add(word_key(i), kClosed)) - kClosed;
        for (int b = 0; b < kPerWord; ++b)
          if ((before >> b) & 1) in_time.push_back(i * kPerWord + b);
      }
      GREX_TRY(st.set(base + "set", encode(in_time)));
      return in_time;
    }
    // Each poll is a store round trip to rank 0's process: every 100 us.
    timespec ts{0, 100'000};
    nanosleep(&ts, nullptr);
  }
}

// The last rank to have decided call `base` (every read of its keys is
// behind each rank's count) erases the call's keys, so a long job's store
// holds none of its past calls. A store that cannot erase keeps them.
Result<void> forget(Communicator::Impl& c, const std::string& base) {
  Store& st = c.bootstrap->store();
  if (GREX_TRY(st.add(base + "done", 1)) != c.size) return ok();
  std::vector<std::string> keys = {base + "close", base + "set", base + "done"};
  for (int i = 0; i < (c.size + kPerWord - 1) / kPerWord; ++i) keys.push_back(base + "w" + std::to_string(i));
  (void)st.erase(keys);
  return ok();
}

// Frees the copies whose sends to late ranks all finished; with `room` (a
// call of `bytes` and up to `sends` sends to come), first waits for the
// oldest until that call fits under the limits.
Result<void> reap(Communicator::Impl& c, bool room, size_t bytes = 0, size_t sends = 0) {
  auto finished = [&](const Communicator::Impl::Delivery& d) {
    return std::all_of(d.sends.begin(), d.sends.end(), [&](detail::OpId id) { return c.engine->done(id); });
  };
  if (room) {
    GREX_TRY(c.engine->progress());
    size_t held = bytes, posted = sends;
    for (const auto& d : c.deliveries) {
      held += d.copy->length();
      posted += d.sends.size();
    }
    for (size_t k = 0; k < c.deliveries.size() && (held > kMaxDeliveryBytes || posted > kMaxDeliverySends); ++k) {
      const auto& d = c.deliveries[k];
      GREX_TRY(c.engine->wait_all(d.sends, c.ctx.deadline(), "deadline allreduce (a late rank's result)"));
      held -= d.copy->length();
      posted -= d.sends.size();
    }
  }
  for (size_t i = 0; i < c.deliveries.size();) {
    if (finished(c.deliveries[i])) {
      MemoryRegion* copy = c.deliveries[i].copy;
      c.deliveries.erase(c.deliveries.begin() + static_cast<std::ptrdiff_t>(i));
      // Kept for the next call's copy; past the limit the smallest goes.
      c.spare_copies.push_back(copy);
      if (c.spare_copies.size() > Communicator::Impl::kSpareCopies) {
        auto smallest = std::min_element(c.spare_copies.begin(), c.spare_copies.end(),
                                         [](const MemoryRegion* a, const MemoryRegion* b) { return a->length() < b->length(); });
        MemoryRegion* gone = *smallest;
        c.spare_copies.erase(smallest);
        GREX_TRY(c.device->free(gone));
      }
    } else {
      ++i;
    }
  }
  return ok();
}

// A region for a late rank's result: the smallest spare that holds it, else a new one.
Result<MemoryRegion*> copy_region(Communicator::Impl& c, size_t bytes) {
  auto best = c.spare_copies.end();
  for (auto it = c.spare_copies.begin(); it != c.spare_copies.end(); ++it)
    if ((*it)->length() >= bytes && (best == c.spare_copies.end() || (*it)->length() < (*best)->length())) best = it;
  if (best == c.spare_copies.end()) return c.device->allocate(std::max<size_t>(bytes, 1));
  MemoryRegion* r = *best;
  c.spare_copies.erase(best);
  return r;
}

}  // namespace

bool poll_deliveries(Communicator::Impl& c) {
  c.engine->poll_quietly();
  (void)reap(c, false);  // an error here (freeing) shows again at the next call's reap
  return !c.deliveries.empty();
}

Result<detail::JobFn> deadline_allreduce_job(Communicator::Impl& c, const void* sendbuf, void* recvbuf, size_t count,
                                             DataType type, ReduceOp op, const AllreduceOptions& o) {
  const size_t bytes = count * dtype_size(type);
  if (bytes > 0 && (sendbuf == nullptr || recvbuf == nullptr)) return bad_arg(c.rank, "allreduce", "null buffer");
  if (o.compression != Compression::kNone)
    return bad_arg(c.rank, "allreduce", "a deadline allreduce takes no compression (yet)");
  if (o.late != LateInput::kDrop && o.late != LateInput::kCarry)
    return bad_arg(c.rank, "allreduce", "unknown late input " + std::to_string(static_cast<int>(o.late)));
  if (o.late == LateInput::kCarry && op != ReduceOp::kSum && op != ReduceOp::kAvg)
    return bad_arg(c.rank, "allreduce", "a carried vector is added: sum or avg, not " +
                                                    std::string(reduce_op_name(op)));
  const int64_t deadline_ms = o.deadline_ms;
  const bool carry = o.late == LateInput::kCarry;
  const void* key = o.feedback_key != nullptr ? o.feedback_key : recvbuf;
  std::vector<int>* contributors = o.contributors;
  return detail::JobFn([&c, sendbuf, recvbuf, count, type, op, bytes, deadline_ms, carry, key,
                        contributors]() -> Result<void> {
    static constexpr const char* what = "deadline allreduce";
    GREX_TRY(c.check_usable(what));
    c.begin({what, "count", count, static_cast<int>(type), static_cast<int>(op), -1});
    if (c.recorder) c.recorder->settle();  // its agreement waits on the store, outside the engine's wait loops
    const uint64_t tag = c.next_tag_base();
    const std::string base = c.opts.name + "/dl/" + std::to_string(++c.deadline_calls) + "/";
    return c.finish(
        [&]() -> Result<void> {
          GREX_TRY(reap(c, true, bytes, static_cast<size_t>(c.size - 1)));
          bool late = false;
          const std::vector<int> in = GREX_TRY(decide(c, base, deadline_ms, &late));
          GREX_TRY(forget(c, base));
          if (contributors != nullptr) *contributors = in;
          std::vector<uint8_t>* carried = nullptr;
          if (carry) {
            carried = &c.carried[key];
            if (carried->size() != bytes) carried->assign(bytes, 0);
          }
          if (bytes == 0) return ok();
          if (late) {
            // This rank's vector: carried into its next call, or dropped.
            // The result comes from the lowest contributor.
            if (carried != nullptr) detail::reduce(carried->data(), carried->data(), sendbuf, count, type, ReduceOp::kSum);
            detail::ScopedRegistration reg(*c.bufs);
            GREX_TRY(reg.acquire(recvbuf, bytes));
            const detail::OpId id =
                GREX_TRY(c.engine->recv(in.front(), reg.get(), reg.offset(recvbuf), bytes, tag | kDeliveryPhase));
            return c.engine->wait(id, c.ctx.deadline(), what);
          }
          // A contributor: this call's input (plus what a late call
          // carried), then the reduction among the contributors.
          if (carried != nullptr) {
            detail::reduce(recvbuf, sendbuf, carried->data(), count, type, ReduceOp::kSum);
            std::fill(carried->begin(), carried->end(), 0);
          } else if (sendbuf != recvbuf) {
            std::memmove(recvbuf, sendbuf, bytes);
          }
          const CollArgs a{recvbuf, recvbuf, count, type, op, 0, tag};
          if (static_cast<int>(in.size()) == c.size && c.ctx.hier != nullptr &&
              detail::hierarchical_usable(c.ctx, *c.world, a) &&
              c.select.allreduce_memo(c.ctx, *c.world, bytes) == detail::Algo::kHierarchical) {
            // Everyone in time, across hosts: the hierarchical allreduce where
            // the model takes it (its levels are the whole world's).
            GREX_TRY(detail::hierarchical_allreduce(c.ctx, *c.world, a));
          } else if (in.size() > 1) {
            const detail::Group g = c.world->sub(in);
            GREX_TRY(detail::allreduce_algorithm(detail::Algo::kRing).run(c.ctx, g, a));
          }
          if (c.rank != in.front() || static_cast<int>(in.size()) == c.size) return ok();
          // The lowest contributor sends the result to every late rank from
          // a copy, and does not wait: they receive it when they enter.
          MemoryRegion* copy = GREX_TRY(copy_region(c, bytes));
          std::memcpy(copy->addr(), recvbuf, bytes);
          c.deliveries.push_back({copy, {}});
          auto& sends = c.deliveries.back().sends;
          for (int p = 0, k = 0; p < c.size; ++p) {
            if (k < static_cast<int>(in.size()) && in[static_cast<size_t>(k)] == p) {
              ++k;
              continue;
            }
            sends.push_back(GREX_TRY(c.engine->send_background(p, copy, 0, bytes, tag | kDeliveryPhase)));
          }
          c.queue.kick();  // the sends progress between calls (dpdk needs this side's polls)
          return ok();
        }(),
        what);
  });
}

}  // namespace grex
