// SPDX-License-Identifier: Apache-2.0
// Direct allreduce, for devices with one-sided reads and writes (shm): rank r
// alone reduces segment r. It reads that segment from every peer's input
// (block by block, into a cache-sized landing area), folds the blocks into its
// own output, and writes the finished block into every peer's output while it
// is still in cache. Each input byte is read once and each output byte
// written once; nothing is re-read from memory for a second pass, and there
// is no chain of n-1 dependent steps as in the ring.
//
// Ordering, with two message rounds:
//   1. every rank sends each peer a descriptor of its input and output
//      (RemoteRegion + offset); receiving a peer's descriptor means the peer
//      has entered this collective, so its input is ready and segment r of its
//      output is ours to write (no one else touches segment r anywhere);
//   2. after its writes complete, every rank sends each peer "done"; a rank
//      returns once every peer said done, so no one reads its input or writes
//      its output any more.
// In place works: rank r reads block b of segment r from a buffer before it
// writes block b of the same segment back into it.
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/shared_area.h"
#include "collectives/reduce.h"
#include "core/copy.h"

namespace grex::detail {
namespace {

struct Descriptor {
  RemoteRegion in;
  uint64_t in_offset;
  RemoteRegion out;
  uint64_t out_offset;
  uint64_t count;  // the call as this rank made it: a cheap check that all agree
  int32_t dtype;
  int16_t op;
  uint16_t flags;  // kAllocated: both buffers are Communicator::alloc memory; kInPlace
};
constexpr uint16_t kAllocated = 1;
constexpr uint16_t kInPlace = 2;  // sendbuf == recvbuf
static_assert(sizeof(Descriptor) == 96, "Descriptor is a wire format");

constexpr size_t kSlots = 2;  // landing areas: block b+1 arrives while b is reduced

}  // namespace

bool direct_usable(const Context& c, const Group& g, const CollArgs&) noexcept {
  const Capabilities& caps = c.capabilities();
  return caps.read && caps.write_imm && g.size() > 1;
}

Result<void> direct_allreduce(Context& c, const Group& g, const CollArgs& a) {
  const void* sendbuf = a.send;
  void* recvbuf = a.recv;
  const size_t count = a.count;
  const DataType type = a.type;
  const ReduceOp op = a.op;
  const size_t es = dtype_size(type);
  const int n = g.size();
  const int r = g.rank();
  const size_t npeers = static_cast<size_t>(n - 1);
  // Block: the landing area for all peers' pieces of one block is one chunk.
  // Blocks of at least 256 KiB per peer (fewer, larger copies: with CMA each
  // is a system call pinning pages; 4 ranks at 16 MiB ran 15 % faster than
  // with the chunk split three ways), while the landing areas of all peers
  // stay within 2 MiB of cache.
  const size_t want = std::max<size_t>(c.opts->chunk_bytes / npeers, 256 * 1024);
  const size_t fit = (2u << 20) / (kSlots * npeers);
  const size_t block = std::max<size_t>(4096 / es * es, std::min(want, fit) / es * es);
  const size_t desc_bytes = sizeof(Descriptor) * static_cast<size_t>(n);
  const size_t land_base = (desc_bytes + 4095) / 4096 * 4096;
  const size_t slot_bytes = block * npeers;
  GREX_TRY(c.bufs->ensure_scratch(land_base + kSlots * slot_bytes));
  MemoryRegion* scratch = c.bufs->scratch();

  ScopedRegistration sreg(*c.bufs), rreg(*c.bufs);
  GREX_TRY(sreg.acquire(sendbuf, count * es));
  GREX_TRY(rreg.acquire(recvbuf, count * es));
  const uint64_t roff = rreg.offset(recvbuf);

  const uint64_t tag = a.tag;
  Deadline dl = c.deadline();
  Engine& engine = g.engine();
  auto* descs = static_cast<Descriptor*>(scratch->addr());  // [peer]; [r] is ours
  const uint16_t flags = static_cast<uint16_t>((c.bufs->is_user_alloc(sreg.get()) && c.bufs->is_user_alloc(rreg.get()) ? kAllocated : 0) |
                                              (sendbuf == recvbuf ? kInPlace : 0));
  descs[r] = Descriptor{sreg.get()->remote(), sreg.offset(sendbuf), rreg.get()->remote(), roff,
                        count, static_cast<int32_t>(type), static_cast<int16_t>(op), flags};
  // The descriptors travel under the sequence number alone (no signature in
  // the tag), so ranks that disagree on count, dtype or op still meet here
  // and fail at once, naming both calls, instead of at the timeout.
  const uint64_t desc_tag = tag & ~(uint64_t{0xfff} << 20);

  // Round 1: descriptors.
  std::vector<OpId> ids;
  ids.reserve(2 * npeers + kSlots * npeers);
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    ids.push_back(
        GREX_TRY(g.recv(j, scratch, sizeof(Descriptor) * static_cast<size_t>(j), sizeof(Descriptor), desc_tag)));
  }
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    ids.push_back(
        GREX_TRY(g.send(j, scratch, sizeof(Descriptor) * static_cast<size_t>(r), sizeof(Descriptor), desc_tag)));
  }
  GREX_TRY(engine.wait_all(ids, dl, "allreduce (direct): descriptors"));
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    if (engine.bytes(ids[static_cast<size_t>(j < r ? j : j - 1)]) != sizeof(Descriptor))
      return Error(Errc::kMismatch, "allreduce (direct): rank " + std::to_string(g.global(j)) +
                                        " sent a malformed descriptor")
          .rank(c.rank)
          .peer(g.global(j));
    const Descriptor& d = descs[j];
    if (d.count != count || d.dtype != static_cast<int32_t>(type) || d.op != static_cast<int16_t>(op))
      return c.mismatch(g.global(j), CallSig{"allreduce", "count", d.count, d.dtype, d.op, -1});
  }
  // Every rank decides alike, from every rank's descriptor: peers' allocated
  // memory is read and written in place through its mapping, which beats
  // staging; anything else goes through the staging slots where they are
  // set up (the kernel's copies are slower).
  bool all_allocated = true, any_in_place = false;
  for (int j = 0; j < n; ++j) {
    all_allocated = all_allocated && (descs[j].flags & kAllocated) != 0;
    any_in_place = any_in_place || (descs[j].flags & kInPlace) != 0;
  }
  if (!all_allocated && staged_fits(c, g, count * es, any_in_place)) return staged_allreduce(c, g, a);

  // Segment r: elements [first, first + len).
  const size_t first = count / static_cast<size_t>(n) * static_cast<size_t>(r) +
                       std::min<size_t>(static_cast<size_t>(r), count % static_cast<size_t>(n));
  const size_t len = count / static_cast<size_t>(n) + (static_cast<size_t>(r) < count % static_cast<size_t>(n) ? 1 : 0);
  const size_t seg_bytes = len * es;
  const size_t nblocks = (seg_bytes + block - 1) / block;
  auto* in = static_cast<const uint8_t*>(sendbuf) + first * es;
  auto* out = static_cast<uint8_t*>(recvbuf) + first * es;
  auto* land = static_cast<uint8_t*>(scratch->addr()) + land_base;
  const bool in_place = sendbuf == recvbuf;
  const bool stream_out = count * es >= kStreamOutputMinBytes;

  // Peers in the order their blocks are folded in: r+1, r+2, ... (own input first).
  auto peer_at = [&](size_t k) { return static_cast<int>((static_cast<size_t>(r) + 1 + k) % static_cast<size_t>(n)); };
  std::vector<OpId> reads(kSlots * npeers), writes(kSlots * npeers);
  std::vector<bool> writes_posted(kSlots, false);
  auto post_reads = [&](size_t b) -> Result<void> {
    const size_t slot = b % kSlots;
    const uint64_t off = b * block, blen = std::min<uint64_t>(block, seg_bytes - off);
    if (writes_posted[slot]) {  // the slot's previous block may still be on its way out
      GREX_TRY(engine.wait_all(std::span(writes).subspan(slot * npeers, npeers), dl, "allreduce (direct): writes"));
      writes_posted[slot] = false;
    }
    for (size_t k = 0; k < npeers; ++k) {
      const Descriptor& d = descs[peer_at(k)];
      reads[slot * npeers + k] = GREX_TRY(g.read(peer_at(k), scratch, land_base + slot * slot_bytes + k * block,
                                                       blen, d.in, d.in_offset + first * es + off));
    }
    return ok();
  };

  if (nblocks > 0) GREX_TRY(post_reads(0));
  for (size_t b = 0; b < nblocks; ++b) {
    const size_t slot = b % kSlots;
    const uint64_t off = b * block, blen = std::min<uint64_t>(block, seg_bytes - off);
    if (b + 1 < nblocks) GREX_TRY(post_reads(b + 1));
    // Fold the pieces in as they arrive, in peer order (the same order every
    // run). In place, into the output: its lines are in cache from reading
    // them as input. Out of place, into the first landing area, so the
    // output lines need not be read for ownership: the result goes out to
    // every output (ours and the peers') with streaming stores when large.
    uint8_t* acc = in_place ? out + off : land + slot * slot_bytes;
    for (size_t k = 0; k < npeers; ++k) {
      GREX_TRY(engine.wait(reads[slot * npeers + k], dl, "allreduce (direct): reads"));
      reduce(acc, k == 0 ? in + off : acc, land + slot * slot_bytes + k * block, blen / es, type, op);
    }
    if (op == ReduceOp::kAvg) scale_avg(acc, blen / es, type, n);
    const MemoryRegion* src_mr = in_place ? rreg.get() : scratch;
    const uint64_t src_off = in_place ? roff + first * es + off : land_base + slot * slot_bytes;
    for (size_t k = 0; k < npeers; ++k) {
      const Descriptor& d = descs[peer_at(k)];
      writes[slot * npeers + k] = GREX_TRY(
          g.write(peer_at(k), src_mr, src_off, blen, d.out, d.out_offset + first * es + off, !in_place));
    }
    if (!in_place) {
      if (stream_out)
        copy_streaming(out + off, acc, blen);
      else
        std::memcpy(out + off, acc, blen);
    }
    writes_posted[slot] = true;
  }
  for (size_t slot = 0; slot < kSlots; ++slot)
    if (writes_posted[slot])
      GREX_TRY(engine.wait_all(std::span(writes).subspan(slot * npeers, npeers), dl, "allreduce (direct): writes"));

  // Round 2: done.
  ids.clear();
  for (int j = 0; j < n; ++j)
    if (j != r) ids.push_back(GREX_TRY(g.recv(j, scratch, 0, 0, tag | (1ull << 16))));
  for (int j = 0; j < n; ++j)
    if (j != r) ids.push_back(GREX_TRY(g.send(j, scratch, 0, 0, tag | (1ull << 16))));
  return engine.wait_all(ids, dl, "allreduce (direct): completion");
}

}  // namespace grex::detail
