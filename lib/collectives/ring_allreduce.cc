// SPDX-License-Identifier: Apache-2.0
// Ring allreduce: reduce-scatter then allgather around the ring, each step
// pipelined in chunks (bandwidth-optimal: 2(n-1)/n of the vector per rank).
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/reduce.h"
#include "collectives/stream.h"

namespace grex::detail {

Result<void> ring_allreduce(Context& c, const Group& g, const CollArgs& a) {
  const void* sendbuf = a.send;
  void* recvbuf = a.recv;
  const size_t count = a.count;
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

  // Segment i: elements [first[i], first[i] + len[i]).
  std::vector<size_t> first(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i)
    first[static_cast<size_t>(i) + 1] =
        first[static_cast<size_t>(i)] + count / static_cast<size_t>(n) + (static_cast<size_t>(i) < count % static_cast<size_t>(n) ? 1 : 0);
  auto seg_first = [&](int s) { return first[static_cast<size_t>(s)]; };
  auto seg_len = [&](int s) { return first[static_cast<size_t>(s) + 1] - first[static_cast<size_t>(s)]; };
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
  // This rank now holds the reduced segment r+1.
  if (op == ReduceOp::kAvg) scale_avg(out + seg_first(mod(r + 1)) * es, seg_len(mod(r + 1)), type, n);

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

}  // namespace grex::detail
