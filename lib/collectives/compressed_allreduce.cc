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
  if (n == 1) {  // this rank's own contribution: its input plus the residual of the last call
    for (size_t i = 0; i < count; ++i) out[i] = residual != nullptr ? in[i] + residual[i] : in[i];
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

  // Reduce-scatter: at step k send segment r-k, each chunk rounded just
  // before it is posted (earlier chunks are on the wire meanwhile); receive
  // segment r-k-1 and add this rank's contribution to the widened partial
  // sum. Step 0 sends this rank's own contribution: its input, with
  // feedback plus the residual (summed a chunk at a time into a buffer of
  // the worker's thread).
  static thread_local std::vector<float> contribution;
  for (int k = 0; k < n - 1; ++k) {
    const size_t ss = mod(r - k), rs = mod(r - k - 1);
    const bool last = k == n - 2;  // rs is the segment this rank finishes (r + 1)
    auto before_send = [&](uint64_t o, uint64_t len) {
      const size_t e = off[ss] + o / sizeof(Narrow), m = len / sizeof(Narrow);
      float* res = residual != nullptr ? residual + e : nullptr;
      if (k > 0) {
        narrow_f32(kind, out + e, m, w + e, res, 1.0f);
      } else if (res == nullptr) {
        narrow_f32(kind, in + e, m, w + e, nullptr, 1.0f);
      } else {
        contribution.resize(m);
        for (size_t i = 0; i < m; ++i) contribution[i] = in[e + i] + res[i];
        std::memset(res, 0, m * sizeof(float));
        narrow_f32(kind, contribution.data(), m, w + e, res, 1.0f);
      }
    };
    // The last step finishes this rank's segment a chunk at a time: average
    // it, round it once for everyone (its rounding error, in sum units, is
    // this rank's to carry) and keep the rounded value.
    auto on_chunk = [&](size_t, const uint8_t* data, uint64_t o, uint64_t len) {
      const size_t e = off[rs] + o / sizeof(Narrow), m = len / sizeof(Narrow);
      float* res = residual != nullptr ? residual + e : nullptr;
      widen_add(kind, reinterpret_cast<const Narrow*>(data), m, in + e, res, out + e);
      if (res != nullptr) std::memset(res, 0, m * sizeof(float));  // added in
      if (last) {
        if (avg) scale_avg(out + e, m, DataType::kFloat32, n);
        narrow_f32(kind, out + e, m, w + e, res, avg ? static_cast<float>(n) : 1.0f);
        widen(kind, w + e, m, out + e);
      }
    };
    StreamSide snd{next, wreg.get(), woff + off[ss] * sizeof(Narrow), cnt[ss] * sizeof(Narrow)};
    StreamSide rcv{prev, nullptr, 0, cnt[rs] * sizeof(Narrow)};
    GREX_TRY(stream(c, g, snd, rcv, chunk, a.tag | static_cast<uint64_t>(k), on_chunk, before_send));
  }

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
