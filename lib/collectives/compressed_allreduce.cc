// SPDX-License-Identifier: Apache-2.0
// Compressed ring allreduce (issue 29): float32 vectors travel as 16-bit
// floats (bf16 or fp16) and are accumulated in float32 at every hop. The
// compression is inside the algorithm, not a pass before it: each
// reduce-scatter step sends the running partial sum of one segment, rounded
// to 16 bits, and the receiver adds its own float32 input to the widened
// value; the owner of a finished segment rounds it once and the allgather
// forwards those 16-bit values as they are, so every rank ends with the same
// bits. Half the bytes of the float32 ring cross the wire.
//
// Error feedback: every rounding this rank does (its sends in the
// reduce-scatter, its owned segment before the allgather) leaves a residual
// in a float32 vector kept per buffer; the next call adds the residual to
// this rank's input. Each rounding error is kept by exactly one rank, so over
// calls the results add up to the inputs' sum, off by the last residuals
// only (in sum units; an average's owner scales its error back up by n).
#include <cstring>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/reduce.h"
#include "collectives/stream.h"
#include "collectives/compress_kernels.h"

namespace grex::detail {
namespace {

using Narrow = uint16_t;

}  // namespace

Result<void> compressed_ring_allreduce(Context& c, const Group& g, const CollArgs& a, Compression kind,
                                       float* residual, std::vector<uint16_t>* wire) {
  const auto* in = static_cast<const float*>(a.send);
  auto* out = static_cast<float*>(a.recv);
  const size_t count = a.count;
  const int n = g.size(), r = g.rank();
  const bool avg = a.op == ReduceOp::kAvg;
  // This rank's own contribution: its input plus the residual of the last call.
  auto own = [&](size_t i) { return residual != nullptr ? in[i] + residual[i] : in[i]; };
  if (n == 1) {
    for (size_t i = 0; i < count; ++i) out[i] = own(i);
    if (residual != nullptr) std::memset(residual, 0, count * sizeof(float));
    return ok();
  }
  // Segment s: count/n elements, the first count%n one more.
  std::vector<size_t> off(static_cast<size_t>(n)), cnt(static_cast<size_t>(n));
  for (size_t s = 0, at = 0; s < static_cast<size_t>(n); ++s) {
    off[s] = at;
    cnt[s] = count / static_cast<size_t>(n) + (s < count % static_cast<size_t>(n) ? 1 : 0);
    at += cnt[s];
  }
  auto mod = [n](int x) { return static_cast<size_t>(((x % n) + n) % n); };
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  wire->resize(std::max<size_t>(count, 1));
  Narrow* w = wire->data();
  const size_t chunk = std::max<size_t>(2, c.opts->chunk_bytes / 2 * 2);
  GREX_TRY(c.bufs->ensure_scratch(chunk * kStreamWindow));
  ScopedRegistration wreg(*c.bufs);
  GREX_TRY(wreg.acquire(w, count * sizeof(Narrow)));
  const uint64_t woff = wreg.offset(w);

  // Reduce-scatter: at step k send segment r-k (rounded), receive segment
  // r-k-1 and add this rank's contribution to the widened partial sum.
  // Step 0 sends this rank's own contribution: its input, or with feedback
  // its input plus the residual (kept in a buffer of the worker's thread).
  static thread_local std::vector<float> contribution;
  for (int k = 0; k < n - 1; ++k) {
    const size_t ss = mod(r - k), rs = mod(r - k - 1);
    if (k == 0 && residual == nullptr) {
      narrow_f32(kind, in + off[ss], cnt[ss], w + off[ss], nullptr, 1.0f);
    } else if (k == 0) {
      contribution.resize(cnt[ss]);
      for (size_t i = 0; i < cnt[ss]; ++i) contribution[i] = own(off[ss] + i);
      std::memset(residual + off[ss], 0, cnt[ss] * sizeof(float));
      narrow_f32(kind, contribution.data(), cnt[ss], w + off[ss], residual + off[ss], 1.0f);
    } else {
      narrow_f32(kind, out + off[ss], cnt[ss], w + off[ss], residual != nullptr ? residual + off[ss] : nullptr, 1.0f);
    }
    StreamSide snd{next, wreg.get(), woff + off[ss] * sizeof(Narrow), cnt[ss] * sizeof(Narrow)};
    StreamSide rcv{prev, nullptr, 0, cnt[rs] * sizeof(Narrow)};
    const size_t base = off[rs];
    GREX_TRY(stream(c, g, snd, rcv, chunk, a.tag | static_cast<uint64_t>(k),
                    [&](size_t, const uint8_t* data, uint64_t o, uint64_t len) {
                      const size_t first = base + o / sizeof(Narrow);
                      widen_add(kind, reinterpret_cast<const Narrow*>(data), len / sizeof(Narrow), in + first,
                                residual != nullptr ? residual + first : nullptr, out + first);
                    }));
    if (residual != nullptr) std::memset(residual + base, 0, cnt[rs] * sizeof(float));  // added in above
  }
  // This rank owns segment r+1: average it, round it once for everyone (its
  // rounding error, in sum units, is this rank's to carry), keep the rounded value.
  const size_t mine = mod(r + 1);
  if (avg) scale_avg(out + off[mine], cnt[mine], DataType::kFloat32, n);
  narrow_f32(kind, out + off[mine], cnt[mine], w + off[mine], residual != nullptr ? residual + off[mine] : nullptr,
             avg ? static_cast<float>(n) : 1.0f);
  widen(kind, w + off[mine], cnt[mine], out + off[mine]);

  // Allgather: the 16-bit values go around as they are, received into the
  // wire buffer (forwarded from there) and widened into the output.
  for (int k = 0; k < n - 1; ++k) {
    const size_t ss = mod(r + 1 - k), rs = mod(r - k);
    StreamSide snd{next, wreg.get(), woff + off[ss] * sizeof(Narrow), cnt[ss] * sizeof(Narrow)};
    StreamSide rcv{prev, wreg.get(), woff + off[rs] * sizeof(Narrow), cnt[rs] * sizeof(Narrow)};
    const size_t base = off[rs];
    GREX_TRY(stream(c, g, snd, rcv, chunk, a.tag | (1ull << 16) | static_cast<uint64_t>(k),
                    [&](size_t, const uint8_t* data, uint64_t o, uint64_t len) {
                      widen(kind, reinterpret_cast<const Narrow*>(data), len / sizeof(Narrow),
                            out + base + o / sizeof(Narrow));
                    }));
  }
  return ok();
}

}  // namespace grex::detail
