// SPDX-License-Identifier: Apache-2.0
// Ring allreduce: reduce-scatter then allgather around the ring, each step
// pipelined in chunks (bandwidth-optimal: 2(n-1)/n of the vector per rank).
// The segmented form takes any layout of the segments, so the hierarchical
// allreduce runs its intra-host phases on shards that line up across hosts.
#include <cstring>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/reduce.h"
#include "collectives/stream.h"

namespace grex::detail {

Result<void> ring_allreduce_segments(Context& c, const Group& g, const CollArgs& a, std::span<const size_t> seg_off,
                                     std::span<const size_t> seg_cnt, int avg_divisor, const RingBetween& between) {
  const void* sendbuf = a.send;
  void* recvbuf = a.recv;
  size_t count = 0;  // the extent the segments cover
  for (size_t s = 0; s < seg_off.size(); ++s) count = std::max(count, seg_off[s] + seg_cnt[s]);
  const DataType type = a.type;
  const ReduceOp op = a.op;
  const size_t es = dtype_size(type);
  const int n = g.size();
  const int r = g.rank();
  const int next = (r + 1) % n;
  const int prev = (r + n - 1) % n;
  const size_t chunk = std::max<size_t>(es, c.opts->chunk_bytes / es * es);
  GREX_TRY(c.bufs->ensure_scratch(chunk * kStreamWindow));

  ScopedRegistration sreg(*c.bufs), rreg(*c.bufs);
  GREX_TRY(sreg.acquire(sendbuf, count * es));
  GREX_TRY(rreg.acquire(recvbuf, count * es));
  const uint64_t soff = sreg.offset(sendbuf);
  const uint64_t roff = rreg.offset(recvbuf);
  const bool stage_in = c.should_stage(sreg.get(), count * es), stage_out = c.should_stage(rreg.get(), count * es);
  if (stage_in || stage_out) GREX_TRY(c.bufs->ensure_staging(chunk * kStreamWindow));

  auto seg_first = [&](int s) { return seg_off[static_cast<size_t>(s)]; };
  auto seg_len = [&](int s) { return seg_cnt[static_cast<size_t>(s)]; };
  auto mod = [n](int x) { return ((x % n) + n) % n; };

  const uint64_t tag = a.tag;
  auto* in = static_cast<const uint8_t*>(sendbuf);
  auto* out = static_cast<uint8_t*>(recvbuf);

  // Reduce-scatter: at step k send segment r-k, receive segment r-k-1 and fold it in.
  for (int k = 0; k < n - 1; ++k) {
    int ss = mod(r - k), rs = mod(r - k - 1);
    StreamSide snd{next, k == 0 ? sreg.get() : rreg.get(), (k == 0 ? soff : roff) + seg_first(ss) * es,
                   seg_len(ss) * es, k == 0 ? stage_in : stage_out};
    StreamSide rcv{prev, nullptr, 0, seg_len(rs) * es};
    size_t base = seg_first(rs) * es;
    GREX_TRY(stream(c, g, snd, rcv, chunk, tag | static_cast<uint64_t>(k),
                    [&](size_t, const uint8_t* data, uint64_t off, uint64_t len) {
                      reduce(out + base + off, in + base + off, data, len / es, type, op);
                    }));
  }
  // This rank now holds the reduced segment r+1 (a lone member: its own copy).
  const int mine = mod(r + 1);
  if (n == 1 && in != out) std::memmove(out + seg_first(mine) * es, in + seg_first(mine) * es, seg_len(mine) * es);
  if (op == ReduceOp::kAvg) scale_avg(out + seg_first(mine) * es, seg_len(mine), type, avg_divisor);
  if (between) GREX_TRY(between(seg_first(mine), seg_len(mine)));

  // Allgather: at step k send segment r+1-k, receive segment r-k in place.
  for (int k = 0; k < n - 1; ++k) {
    int ss = mod(r + 1 - k), rs = mod(r - k);
    StreamSide snd{next, rreg.get(), roff + seg_first(ss) * es, seg_len(ss) * es, stage_out};
    StreamSide rcv{prev, rreg.get(), roff + seg_first(rs) * es, seg_len(rs) * es};
    GREX_TRY(stream(c, g, snd, rcv, chunk, tag | (1ull << 16) | static_cast<uint64_t>(k),
                    [](size_t, const uint8_t*, uint64_t, uint64_t) {}));
  }
  return ok();
}

Result<void> ring_allreduce(Context& c, const Group& g, const CollArgs& a) {
  const int n = g.size();
  // Segment i: count/n elements, the first count%n one more. Few members:
  // on the stack (the call path allocates nothing for up to 64).
  constexpr size_t kStack = 64;
  size_t off_s[kStack], cnt_s[kStack];
  std::vector<size_t> off_v, cnt_v;
  size_t* off = off_s;
  size_t* cnt = cnt_s;
  if (static_cast<size_t>(n) > kStack) {
    off_v.resize(static_cast<size_t>(n));
    cnt_v.resize(static_cast<size_t>(n));
    off = off_v.data();
    cnt = cnt_v.data();
  }
  size_t at = 0;
  for (int i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    off[u] = at;
    cnt[u] = a.count / static_cast<size_t>(n) + (u < a.count % static_cast<size_t>(n) ? 1 : 0);
    at += cnt[u];
  }
  return ring_allreduce_segments(c, g, a, std::span<const size_t>(off, static_cast<size_t>(n)),
                                 std::span<const size_t>(cnt, static_cast<size_t>(n)), n, RingBetween{});
}

}  // namespace grex::detail
