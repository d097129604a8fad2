// SPDX-License-Identifier: Apache-2.0
// Staged direct allreduce, for every rank on this host with load/store
// access to peers' memory (shm): rank r reduces segment r, as in direct,
// but no kernel copy is involved. Another process's malloc memory is out
// of reach of loads and stores, so each rank copies its own input, block by
// block, into small slots of its shared area, where the peer that reduces
// the segment reads it; the reducer leaves each finished block in a result
// slot, from which every rank copies it into its own output. The slots are
// reused every few blocks, so they stay in cache: the bytes cross between
// cores through the cache, and memory sees what the bound counts (each
// input read once, each output written once). A CMA copy does the same
// move page by page in the kernel, at about half the speed (docs/benchmarks.md).
//
// Blocks carry sequence numbers q that every rank counts alike across calls;
// S slots of each kind (q mod S) let a rank run S blocks ahead. Rank r:
//   1. publishes block q: for each peer j, waits until j has consumed r's
//      slot of block q - S (j's flag consumed[r] >= q - S), copies block q of
//      segment j of its input there, and sets pub[j][q mod S] = q with the
//      call's signature beside it;
//   2. reduces block q: waits until every peer has pulled r's result slot of
//      block q - S (pulled[r] >= q - S), then folds, in rank order, its own
//      input and each peer's published block (checking its signature) into
//      the result slot, sets consumed[p] = q for every peer and res = q, and
//      copies the result into its output (out of place, during the next
//      step's copies);
//   3. pulls block q: for each peer j, waits for j's res >= q, copies j's
//      result slot into its output and sets pulled[j] = q.
// Step i publishes block i and pulls block i - 2, peer by peer, each pair of
// copies in one interleaved pass, then reduces i - 1, so what a step waits
// for was mostly produced a step earlier. Every flag is a 64-bit
// sequence in a cache line of its own, written only by its owner (release)
// and read by peers (acquire). No deadlock: while r waits at step i, each
// peer can finish its step i - 1, which needs of r only steps before i.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "collectives/algorithm.h"
#include "collectives/shared_area.h"
#include "collectives/reduce.h"
#include "core/copy.h"

namespace grex::detail {
namespace {

constexpr size_t kSlots = 4;               // blocks a rank may run ahead of the slowest peer
constexpr size_t kMaxBlock = 256u << 10;   // bytes per block at most (each slot's size)...
constexpr size_t kSlotBudget = 2u << 20;   // ... and at most this over the number of ranks, so
                                           // one rank's slots for all its peers stay about this
                                           // big (9 MiB per rank at 8 ranks, 8 MiB at 64)
constexpr size_t kMinBlock = 16u << 10;
constexpr size_t kLine = 64;
// "auto" stages vectors from these sizes on (grex-perf allreduce with
// GREX_ALGO=direct, GREX_STAGE_SENDS=never against always, docs/benchmarks.md),
// out of place, and where any rank runs in place. Below them the vector
// stays in cache and the kernel's copies are cheap, in place above all: at
// 2 ranks and 32 MiB a call took 3.0-3.2 ms in place with CMA and 4.3-4.4
// staged, but 6.5-7.5 out of place against 4.9; 64 MiB in place ties
// (10.1-10.8 against 10.1-10.2), 16 MiB out of place too. At 4 ranks (on 2
// cores) staging wins from 8 MiB out of place and 16 MiB in place.
constexpr size_t kStagedMinBytes2 = 32u << 20, kStagedMinBytes2InPlace = 128u << 20;
constexpr size_t kStagedMinBytesN = 8u << 20, kStagedMinBytesNInPlace = 16u << 20;
// The three-phase form against the ring's staged sends inside a host, in the
// hierarchical allreduce: from this size on.
constexpr size_t kStagedSegmentsMinBytes = 1u << 20;

// Flag lines in each rank's staging part: pub[j][slot] (with the call's
// signature after the sequence: a slot's line holds its own block's, while
// the next blocks may already carry the next call's), consumed[j], res,
// pulled[j].
size_t pub_line(int j, uint64_t q) { return static_cast<size_t>(j) * kSlots + q % kSlots; }
size_t consumed_line(int n, int j) { return static_cast<size_t>(n) * kSlots + static_cast<size_t>(j); }
size_t res_line(int n) { return static_cast<size_t>(n) * (kSlots + 1); }
size_t pulled_line(int n, int j) { return static_cast<size_t>(n) * (kSlots + 1) + 1 + static_cast<size_t>(j); }

std::atomic_ref<uint64_t> flag(uint8_t* line) noexcept {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(line));
}

// One call's view of the group's staging parts: where each member's flags and
// slots are, the block size, and the waits (a failed one names a peer that
// published another call, where one did).
class Staging {
 public:
  Staging(Context& c, const Group& g, uint64_t sig, size_t seg_max_bytes, size_t es, const char* what)
      : c_(c), g_(g), sa_(*c.area), n_(g.size()), r_(g.rank()), sig_(sig), what_(what),
        slots_off_(staged_flags_bytes(n_)), slot_bytes_(staged_slot_bytes(n_)) {
    // Blocks: at least four per segment where the segment allows, whole
    // elements and cache lines, within a slot.
    const size_t unit = es * kLine;  // a multiple of both the element and the line
    block_ = std::clamp<size_t>((seg_max_bytes / 4 + unit - 1) / unit * unit, kMinBlock / unit * unit,
                                slot_bytes_ / unit * unit);
    nblocks_ = std::max<uint64_t>(1, (seg_max_bytes + block_ - 1) / block_);
    base_ = sa_.stage_seq;  // every member counts the blocks alike
    sa_.stage_seq += nblocks_;
  }
  size_t block() const noexcept { return block_; }
  uint64_t nblocks() const noexcept { return nblocks_; }
  /// Block b's sequence number.
  uint64_t seq(uint64_t b) const noexcept { return base_ + b + 1; }
  uint8_t* area(int p) const noexcept { return sa_.bases[static_cast<size_t>(p)] + sa_.stage_off; }
  uint8_t* line(int p, size_t i) const noexcept { return area(p) + i * kLine; }
  /// `owner`'s slot of block q for reducer j.
  uint8_t* in_slot(int owner, int j, uint64_t q) const noexcept {
    return area(owner) + slots_off_ + (static_cast<size_t>(j) * kSlots + q % kSlots) * slot_bytes_;
  }
  uint8_t* res_slot(int owner, uint64_t q) const noexcept {
    return area(owner) + slots_off_ + (static_cast<size_t>(n_) * kSlots + q % kSlots) * slot_bytes_;
  }
  /// Publishes (the signature, then q) this member's input slot of block q for j.
  void publish(int j, uint64_t q) const noexcept {
    std::memcpy(line(r_, pub_line(j, q)) + 8, &sig_, sizeof sig_);
    flag(line(r_, pub_line(j, q))).store(q, std::memory_order_release);
  }
  /// A peer that published block q under another signature: kMismatch.
  std::optional<Error> disagrees(int p, uint64_t q) const {
    return published_mismatch(c_, g_, p, line(p, pub_line(r_, q)), sig_);
  }
  /// Until peer's flag line i reaches want (0: at once).
  Result<void> wait(int peer, size_t i, uint64_t want, uint64_t q) const {
    if (want == 0) return ok();
    if (auto w = wait_line(c_, g_, peer, line(peer, i), want, true, what_); !w) {
      for (int p = 0; p < n_; ++p)
        if (p != r_ && flag(line(p, pub_line(r_, q))).load(std::memory_order_acquire) == q)
          if (auto m = disagrees(p, q)) return std::move(*m);
      return std::move(w).error();
    }
    return ok();
  }

 private:
  Context& c_;
  const Group& g_;
  SharedArea& sa_;
  int n_, r_;
  uint64_t sig_;
  const char* what_;
  size_t slots_off_, slot_bytes_, block_ = 0;
  uint64_t nblocks_ = 0, base_ = 0;
};

}  // namespace

size_t staged_flags_bytes(int size) noexcept {
  const size_t lines = static_cast<size_t>(size) * (kSlots + 2) + 1;
  return (lines * kLine + 4095) / 4096 * 4096;
}

size_t staged_slot_bytes(int size) noexcept {
  const size_t b = kSlotBudget / static_cast<size_t>(std::max(size, 1)) / 4096 * 4096;
  return std::clamp(b, kMinBlock, kMaxBlock);
}

size_t staged_area_bytes(int size) noexcept {
  // A slot per peer and block in flight for published inputs (the own index
  // unused), and as many result slots.
  return staged_flags_bytes(size) + (static_cast<size_t>(size) + 1) * kSlots * staged_slot_bytes(size);
}

bool staged_fits(const Context& c, const Group& g, size_t bytes, bool any_in_place) noexcept {
  const int size = g.size();
  if (c.area == nullptr || !c.area->staged_on || size < 2 || !c.area->serves(g)) return false;
  if (c.stage == Stage::kAlways) return true;
  if (size == 2) return bytes >= (any_in_place ? kStagedMinBytes2InPlace : kStagedMinBytes2);
  return bytes >= (any_in_place ? kStagedMinBytesNInPlace : kStagedMinBytesN);
}

Result<void> staged_allreduce(Context& c, const Group& g, const CollArgs& a) {
  const void* sendbuf = a.send;
  void* recvbuf = a.recv;
  const size_t count = a.count;
  const DataType type = a.type;
  const ReduceOp op = a.op;
  const size_t es = dtype_size(type);
  const int n = g.size();
  const int r = g.rank();
  // Segment j: elements [first(j), first(j) + len(j)), as direct splits them.
  auto first = [&](int j) {
    const size_t u = static_cast<size_t>(j);
    return count / static_cast<size_t>(n) * u + std::min<size_t>(u, count % static_cast<size_t>(n));
  };
  auto len = [&](int j) {
    return count / static_cast<size_t>(n) + (static_cast<size_t>(j) < count % static_cast<size_t>(n) ? 1 : 0);
  };
  const Staging st(c, g, pack_sig(count, type, op), len(0) * es, es, "allreduce (staged)");
  const size_t block = st.block();
  const uint64_t nblocks = st.nblocks();
  // Bytes of block b of segment j.
  auto piece = [&](int j, uint64_t b) -> std::pair<size_t, size_t> {
    const size_t seg = len(j) * es, off = std::min<size_t>(b * block, seg);
    return {first(j) * es + off, std::min(block, seg - off)};
  };
  // In place, each output line was read moments ago (published or reduced):
  // plain stores hit the cache and write back later; out of place, large
  // outputs go out with streaming stores, unread.
  const bool stream_out = sendbuf != recvbuf && count * es >= kStreamOutputMinBytes;
  const auto* in = static_cast<const uint8_t*>(sendbuf);

  // Out of place: the own result of the block reduced last, still to be
  // copied out (its slot is rewritten only after the next reduce).
  CopyJob own{};
  // 2. Reduce block b of segment r, in rank order, into the result slot.
  auto reduce_block = [&](uint64_t b) -> Result<void> {
    const uint64_t q = st.seq(b);
    for (int k = 1; k < n; ++k) GREX_TRY(st.wait((r + k) % n, pulled_line(n, r), q > kSlots ? q - kSlots : 0, q));
    const auto [off, bytes] = piece(r, b);
    uint8_t* acc = st.res_slot(r, q);
    auto src = [&](int p) -> const uint8_t* { return p == r ? in + off : st.in_slot(p, r, q); };
    for (int p = 0; p < n; ++p) {
      if (p != r) {
        GREX_TRY(st.wait(p, pub_line(r, q), q, q));
        if (auto m = st.disagrees(p, q)) return std::move(*m);
      }
      if (p > 0 && bytes > 0) detail::reduce(acc, p == 1 ? src(0) : acc, src(p), bytes / es, type, op);
    }
    if (op == ReduceOp::kAvg && bytes > 0) scale_avg(acc, bytes / es, type, n);
    for (int k = 1; k < n; ++k) flag(st.line(r, consumed_line(n, (r + k) % n))).store(q, std::memory_order_release);
    flag(st.line(r, res_line(n))).store(q, std::memory_order_release);
    // Out of place, the own result goes out in the next pass, beside the
    // next blocks' copies; in place its lines were just read, and a plain
    // copy now is faster (docs/benchmarks.md).
    if (stream_out)
      own = {static_cast<uint8_t*>(recvbuf) + off, acc, bytes, true};
    else if (bytes > 0)
      std::memcpy(static_cast<uint8_t*>(recvbuf) + off, acc, bytes);
    return ok();
  };
  // 1 and 3. For each peer j, publish block b of j's segment (when b <
  // nblocks) and copy j's result of block b - 2 into the output (when b >=
  // 2), in one pass, a line of each in turn (out of place with the own
  // result of block b - 1 alongside the first peer's). One copy loads from
  // memory, the others from the cache of j's core or this one's:
  // interleaved, their misses overlap (at 2 ranks and 256 MiB 44 against
  // 49-50 ms one copy after the other, docs/benchmarks.md).
  auto publish_and_pull = [&](uint64_t b) -> Result<void> {
    const uint64_t qp = st.seq(b);      // the block published
    const uint64_t ql = st.seq(b) - 2;  // the block pulled (b >= 2)
    for (int k = 1; k < n; ++k) {
      const int j = (r + k) % n;
      CopyJob jobs[3] = {own, {}, {}};
      own = {};
      if (b < nblocks) {
        GREX_TRY(st.wait(j, consumed_line(n, r), qp > kSlots ? qp - kSlots : 0, qp));
        const auto [off, bytes] = piece(j, b);
        jobs[1] = {st.in_slot(r, j, qp), in + off, bytes, false};
      }
      if (b >= 2) {
        GREX_TRY(st.wait(j, res_line(n), ql, ql));
        const auto [off, bytes] = piece(j, b - 2);
        jobs[2] = {static_cast<uint8_t*>(recvbuf) + off, st.res_slot(j, ql), bytes, stream_out};
      }
      copy_together(jobs, 3);
      if (b < nblocks) st.publish(j, qp);
      if (b >= 2) flag(st.line(r, pulled_line(n, j))).store(ql, std::memory_order_release);
    }
    return ok();
  };
  // Pipelined a step apart, so what each step waits for was produced a
  // step earlier: publish b and pull b - 2 (and copy out b - 1's own
  // result), then reduce b - 1.
  for (uint64_t i = 0; i < nblocks + 2; ++i) {
    GREX_TRY(publish_and_pull(i));
    if (i >= 1 && i <= nblocks) GREX_TRY(reduce_block(i - 1));
  }
  return ok();
}

bool staged_segments_fit(const Context& c, const Group& g, size_t bytes) noexcept {
  if (c.area == nullptr || !c.area->staged_on || g.size() < 2 || !c.area->serves(g)) return false;
  if (c.stage == Stage::kAlways) return true;
  if (c.stage == Stage::kNever) return false;
  return bytes >= kStagedSegmentsMinBytes;
}

// The same slots and flags in three phases rather than one pipeline, for the
// hierarchical allreduce's two steps inside a host (issue 27): the vector's
// reduced segments leave the host between them.
//   1. Reduce-scatter. Block b (q = base + b + 1): publish block b of every
//      peer's segment into its input slot, as above; then reduce block b - 1
//      of the own segment straight into the output (no result slot: nobody
//      reads it yet) and set consumed.
//   2. `between` on the own reduced segment, in the output.
//   3. Allgather. Block b under the same q: copy block b of the own segment
//      from the output into the result slot (once every peer pulled the slot's
//      last block) and set res; then pull block b - 1 of every peer's segment.
// Every q of the range is used once by each kind of slot, as the pipelined
// allreduce uses them, so the two algorithms can follow each other on one
// area. Per byte of the vector a member pays one copy in (publish), one
// reduction, one copy out of its segment and one of each other segment,
// against the ring's staged sends, which copy each byte into the staging
// ring and again out of the peer's ring into scratch before reducing it.
// Where the call's input and output outgrow this core's share of the
// last-level cache, the reduction writes the own segment with streaming
// stores: `between` reads it back only after the whole segment, by when a
// cached write would have been evicted, so its read-for-ownership was
// traffic for nothing (2 hosts x 2 ranks over af_packet: 64 MiB 0-6 %,
// 256 MiB 11-12 % faster, docs/benchmarks.md). Two members only: with more,
// the next member's sum reads the first one's result straight back.
Result<void> staged_allreduce_segments(Context& c, const Group& g, const CollArgs& a, std::span<const size_t> seg_off,
                                       std::span<const size_t> seg_cnt, int avg_divisor, const RingBetween& between) {
  const DataType type = a.type;
  const ReduceOp op = a.op;
  const size_t es = dtype_size(type);
  const int n = g.size();
  const int r = g.rank();
  size_t count = 0, seg_max = 0;
  for (size_t s = 0; s < seg_off.size(); ++s) count = std::max(count, seg_off[s] + seg_cnt[s]);
  for (int j = 0; j < n; ++j) seg_max = std::max(seg_max, seg_cnt[static_cast<size_t>(j)] * es);
  const Staging st(c, g, pack_sig(count, type, op), seg_max, es, "allreduce (staged, hierarchical)");
  const size_t block = st.block();
  const uint64_t nblocks = st.nblocks();
  auto piece = [&](int j, uint64_t b) -> std::pair<size_t, size_t> {
    const size_t seg = seg_cnt[static_cast<size_t>(j)] * es, off = std::min<size_t>(b * block, seg);
    return {seg_off[static_cast<size_t>(j)] * es + off, std::min(block, seg - off)};
  };
  const bool stream_out = a.send != a.recv && count * es >= kStreamOutputMinBytes;
  const bool stream_own = n == 2 && a.send != a.recv && 2 * count * es >= reduce_streaming_min_bytes();
  const auto* in = static_cast<const uint8_t*>(a.send);
  auto* out = static_cast<uint8_t*>(a.recv);

  // 1. Reduce-scatter.
  auto publish = [&](uint64_t b) -> Result<void> {
    const uint64_t q = st.seq(b);
    for (int k = 1; k < n; ++k) {
      const int j = (r + k) % n;
      GREX_TRY(st.wait(j, consumed_line(n, r), q > kSlots ? q - kSlots : 0, q));
      const auto [off, bytes] = piece(j, b);
      if (bytes > 0) std::memcpy(st.in_slot(r, j, q), in + off, bytes);
      st.publish(j, q);
    }
    return ok();
  };
  auto reduce_own = [&](uint64_t b) -> Result<void> {
    const uint64_t q = st.seq(b);
    const auto [off, bytes] = piece(r, b);
    uint8_t* acc = out + off;
    // The own input first (in place, the output is that input), then the
    // peers' in rank order: a fixed order, so every call sums alike.
    const uint8_t* first = in + off;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      GREX_TRY(st.wait(p, pub_line(r, q), q, q));
      if (auto m = st.disagrees(p, q)) return std::move(*m);
      if (bytes > 0 && stream_own)
        reduce_streaming(acc, first, st.in_slot(p, r, q), bytes / es, type, op);
      else if (bytes > 0)
        detail::reduce(acc, first, st.in_slot(p, r, q), bytes / es, type, op);
      first = acc;
    }
    if (n == 1 && bytes > 0 && out != in) std::memmove(acc, in + off, bytes);
    for (int k = 1; k < n; ++k) flag(st.line(r, consumed_line(n, (r + k) % n))).store(q, std::memory_order_release);
    return ok();
  };
  for (uint64_t i = 0; i < nblocks + 1; ++i) {
    if (i < nblocks) GREX_TRY(publish(i));
    if (i >= 1) GREX_TRY(reduce_own(i - 1));
  }
  const size_t mine_first = seg_off[static_cast<size_t>(r)], mine_len = seg_cnt[static_cast<size_t>(r)];
  if (op == ReduceOp::kAvg) scale_avg(out + mine_first * es, mine_len, type, avg_divisor);

  // 2. Between.
  if (between) GREX_TRY(between(mine_first, mine_len));

  // 3. Allgather.
  auto offer = [&](uint64_t b) -> Result<void> {
    const uint64_t q = st.seq(b);
    for (int k = 1; k < n; ++k) GREX_TRY(st.wait((r + k) % n, pulled_line(n, r), q > kSlots ? q - kSlots : 0, q));
    const auto [off, bytes] = piece(r, b);
    if (bytes > 0) std::memcpy(st.res_slot(r, q), out + off, bytes);
    flag(st.line(r, res_line(n))).store(q, std::memory_order_release);
    return ok();
  };
  auto pull = [&](uint64_t b) -> Result<void> {
    const uint64_t q = st.seq(b);
    for (int k = 1; k < n; ++k) {
      const int j = (r + k) % n;
      GREX_TRY(st.wait(j, res_line(n), q, q));
      const auto [off, bytes] = piece(j, b);
      if (bytes > 0) {
        const CopyJob job{out + off, st.res_slot(j, q), bytes, stream_out};
        copy_together(&job, 1);
      }
      flag(st.line(r, pulled_line(n, j))).store(q, std::memory_order_release);
    }
    return ok();
  };
  for (uint64_t i = 0; i < nblocks + 1; ++i) {
    if (i < nblocks) GREX_TRY(offer(i));
    if (i >= 1) GREX_TRY(pull(i - 1));
  }
  return ok();
}

}  // namespace grex::detail
