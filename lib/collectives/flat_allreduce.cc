// SPDX-License-Identifier: Apache-2.0
// Flat allreduce, for small vectors when every rank is on this host and the
// device gives load/store access to peers' memory (shm): each rank owns a
// small shared area that every other rank maps once, at creation. A call is
// one publish and one read of each peer, with no message, completion or
// registration on the way:
//   1. copy the input into this rank's slot, then store the call's sequence
//      number after it (release): the slot header's cache line carries the
//      sequence, the call's signature and the first 48 bytes of data, so an
//      8-byte allreduce moves one line per peer;
//   2. wait until every peer's slot shows the same sequence (acquire), and
//      check its signature (count, dtype, op): ranks that disagree fail at
//      once with kMismatch naming both calls;
//   3. fold the slots in rank order (0, 1, 2, ...) into the output, so every
//      rank computes the same bits.
// Reuse: slots alternate by the sequence's parity. Before a rank writes call
// s + 2 into a slot it has finished call s + 1, so it has read every peer's
// contribution to s + 1, which each peer wrote only after it had finished
// reading everything of call s. No acknowledgement travels.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <string>

#include <sched.h>

#include "collectives/algorithm.h"
#include "collectives/shared_area.h"
#include "collectives/reduce.h"
#include "core/log.h"

namespace grex::detail {
namespace {

constexpr const char* kSubsys = "comm";
constexpr size_t kHead = 16;  // sequence, signature; the data follows in the same cache line

size_t slot_stride(size_t max_bytes) noexcept { return (kHead + max_bytes + 63) & ~size_t{63}; }

// Loads of a peer's line between checks: spinning, an engine poll per 64
// (the line usually arrives first); with more ranks than cores, a yield per
// 4 and an engine poll per 32 yields.
constexpr uint32_t kSpinBurst = 64, kAdaptiveBurst = 4;

// A barrier's signature: no dtype or op has these values.
constexpr uint64_t kBarrierSig = uint64_t{0xffff} << 48;

std::atomic_ref<uint64_t> seq_of(uint8_t* slot) noexcept {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(slot));
}

}  // namespace

Result<void> setup_shared_area(Context& c, const Group& g, bool all_local, Bootstrap& bs, const std::string& key,
                               std::unique_ptr<SharedArea>* out, bool every_rank_exchanges) {
  out->reset();
  const int size = g.size(), rank = g.rank();
  Device& device = *c.device;
  // Every member takes the same branches up to the exchanges below: size,
  // the backend's capability and where the members live are the same for all.
  // Groups that differ by rank (each host's) all exchange, those that cannot
  // use an area with an empty record.
  const bool wanted = size >= 2 && all_local && c.capabilities().load_store;
  if (!wanted && !every_rank_exchanges) return ok();
  // Each member reads (size - 1) slots per call: the option bounds that sum.
  const uint64_t max = size > 1 ? c.opts->flat_max_bytes / static_cast<uint64_t>(size - 1) : 0;
  const size_t stride = slot_stride(max);
  // The staged direct allreduce (staged_allreduce.cc) shares the area: its
  // flags and slots follow the two flat slots.
  const uint64_t flat_bytes = max > 0 ? 2 * stride : 0;
  const uint64_t stage_bytes = c.stage != Stage::kNever ? staged_area_bytes(size) : 0;
  std::string mine(sizeof(RemoteRegion) + 2 * sizeof(uint64_t), '\0');
  MemoryRegion* region = nullptr;
  if (wanted && flat_bytes + stage_bytes > 0) {
    auto area = device.allocate(flat_bytes + stage_bytes);
    if (area) {
      region = *area;
      // The flat slots and the staging flags start at zero; the staging
      // slots are written before they are read.
      std::memset(region->addr(), 0, flat_bytes + std::min<uint64_t>(stage_bytes, staged_flags_bytes(size)));
      RemoteRegion rr = region->remote();
      std::memcpy(mine.data(), &rr, sizeof rr);
      std::memcpy(mine.data() + sizeof rr, &max, sizeof max);
      std::memcpy(mine.data() + sizeof rr + sizeof max, &stage_bytes, sizeof stage_bytes);
    } else {
      GREX_WARN(kSubsys, "flat and staged allreduce off: %s", area.error().message().c_str());
    }
  }
  auto all = GREX_TRY(bs.all_gather(key, mine));
  // Usable only if every member offers an area of the same size and maps all.
  // (The store's all_gather is over the communicator's ranks; the group's
  // records are those of its members.)
  bool usable = region != nullptr;
  std::vector<uint8_t*> bases(static_cast<size_t>(size), nullptr);
  for (int p = 0; p < size && usable; ++p) {
    const std::string& rec = all[static_cast<size_t>(g.global(p))];
    RemoteRegion rr;
    uint64_t theirs = 0, their_stage = 0;
    if (rec.size() != mine.size()) return Error(Errc::kProtocol, "flat setup: malformed record").peer(g.global(p));
    std::memcpy(&rr, rec.data(), sizeof rr);
    std::memcpy(&theirs, rec.data() + sizeof rr, sizeof theirs);
    std::memcpy(&their_stage, rec.data() + sizeof rr + sizeof theirs, sizeof their_stage);
    if (theirs != max || their_stage != stage_bytes) {
      usable = false;
      break;
    }
    if (p == rank) {
      bases[static_cast<size_t>(p)] = static_cast<uint8_t*>(region->addr());
      continue;
    }
    auto m = g.map(p, rr);
    if (!m) {
      GREX_WARN(kSubsys, "flat allreduce off: rank %d's area: %s", g.global(p), m.error().message().c_str());
      usable = false;
      break;
    }
    bases[static_cast<size_t>(p)] = static_cast<uint8_t*>(*m);
  }
  auto votes = GREX_TRY(bs.all_gather(key + "-ok", usable ? "1" : "0"));
  for (int p = 0; p < size; ++p) usable = usable && votes[static_cast<size_t>(g.global(p))] == "1";
  if (!usable) {
    if (region != nullptr) (void)device.free(region);
    return ok();
  }
  auto a = std::make_unique<SharedArea>();
  a->region = region;
  a->members.assign(g.members().begin(), g.members().end());
  a->bases = std::move(bases);
  a->flat_stride = stride;
  a->flat_max = max;
  a->stage_off = stage_bytes > 0 ? flat_bytes : 0;
  a->staged_on = stage_bytes > 0;
  *out = std::move(a);
  return ok();
}

Result<void> wait_line(const Context& c, const Group& g, int peer, uint8_t* line, uint64_t want, bool at_least,
                       const char* what) {
  auto arrived = [&]() {
    const uint64_t v = seq_of(line).load(std::memory_order_acquire);
    return at_least ? v >= want : v == want;
  };
  // Spin on the line; between bursts of loads, let the engine notice a dead
  // or aborting peer (and, after a long wait, yield or nap as it does for
  // messages). With more ranks than cores the awaited rank is likely not
  // running: give it the CPU at once, with a yield per burst.
  Engine& engine = g.engine();
  engine.wait_begins();  // this rank's part is published: the recorder's work overlaps the peer's
  SpinDeadline deadline(c.opts->timeout_ms);
  const bool adaptive = engine.adaptive();
  const uint32_t burst = adaptive ? kAdaptiveBurst : kSpinBurst;
  uint32_t bursts = 0;
  uint64_t t0 = 0;  // read at the first check (most waits end before it)
  bool warned = false;
  for (uint32_t spins = 1; !arrived(); ++spins) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if ((spins & (burst - 1)) != 0) continue;
    ++bursts;
    if (adaptive && (bursts & 31) != 0) {
      sched_yield();
      continue;
    }
    GREX_TRY(engine.progress());
    GREX_TRY(g.check_peer(peer));
    if ((bursts & 15) != 0) continue;
    if (t0 == 0) t0 = now_ns();
    engine.warn_if_long(t0, &warned, what, g.global(peer));
    if (deadline.expired())
      return Error(Errc::kTimeout, std::string(what) + " timed out after " + std::to_string(c.opts->timeout_ms) +
                                       " ms waiting on rank " + std::to_string(g.global(peer)))
          .rank(c.rank)
          .peer(g.global(peer))
          .hint("a rank is slower, stuck, or called a different collective; raise GREX_TIMEOUT_MS if it is just slow");
  }
  engine.note_progress();
  if (t0 != 0) engine.long_wait_ended();
  return ok();
}

namespace {

// kMismatch naming both calls, from a peer's packed signature (or the flat
// barrier's).
Error packed_mismatch(const Context& c, int global_peer, uint64_t theirs) {
  if (theirs == kBarrierSig) return c.mismatch(global_peer, CallSig{"barrier"});
  return c.mismatch(global_peer, CallSig{"allreduce", "count", theirs & ((uint64_t{1} << 48) - 1),
                                         static_cast<int>((theirs >> 48) & 0xff), static_cast<int>(theirs >> 56), -1});
}

// Publishes `bytes` of data under `sig` in this member's next slot and waits
// until every peer published the same call; returns the slot's offset.
Result<size_t> flat_exchange(const Context& c, const Group& g, SharedArea& area, const void* data, size_t bytes,
                             uint64_t sig, const char* what) {
  const int size = g.size(), rank = g.rank();
  const uint64_t seq = ++area.flat_seq;
  const size_t slot = (seq & 1) * area.flat_stride;
  uint8_t* mine = area.bases[static_cast<size_t>(rank)] + slot;
  if (bytes > 0) std::memcpy(mine + kHead, data, bytes);
  std::memcpy(mine + 8, &sig, sizeof sig);
  seq_of(mine).store(seq, std::memory_order_release);
  // A peer's slot of this call, if it is there and disagrees: kMismatch.
  auto disagrees = [&](int p) -> std::optional<Error> {
    uint8_t* theirs_slot = area.bases[static_cast<size_t>(p)] + slot;
    if (seq_of(theirs_slot).load(std::memory_order_acquire) != seq) return std::nullopt;
    return published_mismatch(c, g, p, theirs_slot, sig);
  };
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    if (auto w = wait_line(c, g, p, area.bases[static_cast<size_t>(p)] + slot, seq, false, what); !w) {
      // A member that saw a mismatch published its slot before it aborted:
      // whoever learns of the abort first names both calls too.
      for (int q = 0; q < size; ++q)
        if (q != rank)
          if (auto e = disagrees(q)) return std::move(*e);
      return std::move(w).error();
    }
    if (auto e = disagrees(p)) return std::move(*e);
  }
  return slot;
}

}  // namespace

std::optional<Error> published_mismatch(const Context& c, const Group& g, int peer, const uint8_t* line,
                                        uint64_t sig) {
  uint64_t theirs;
  std::memcpy(&theirs, line + 8, sizeof theirs);
  if (theirs == sig) return std::nullopt;
  return packed_mismatch(c, g.global(peer), theirs);
}

bool flat_usable(const Context& c, const Group& g, const CollArgs& a) noexcept {
  const size_t bytes = a.count * dtype_size(a.type);
  return c.area != nullptr && bytes > 0 && bytes <= c.area->flat_max && c.area->serves(g);
}

Result<void> flat_allreduce(Context& c, const Group& g, const CollArgs& a) {
  SharedArea& area = *c.area;
  const size_t slot = GREX_TRY(
      flat_exchange(c, g, area, a.send, a.count * dtype_size(a.type), pack_sig(a.count, a.type, a.op), "allreduce (flat)"));
  // Member order, from the slots (the own one too: in place, recv is the input).
  const auto& b = area.bases;
  reduce(a.recv, b[0] + slot + kHead, b[1] + slot + kHead, a.count, a.type, a.op);
  for (size_t p = 2; p < b.size(); ++p) reduce(a.recv, a.recv, b[p] + slot + kHead, a.count, a.type, a.op);
  if (a.op == ReduceOp::kAvg) scale_avg(a.recv, a.count, a.type, g.size());
  return ok();
}

// A barrier through the same slots (no data).
Result<void> flat_barrier(Context& c, const Group& g, const CollArgs&) {
  GREX_TRY(flat_exchange(c, g, *c.area, nullptr, 0, kBarrierSig, "barrier (flat)"));
  return ok();
}

}  // namespace grex::detail
