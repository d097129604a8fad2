// SPDX-License-Identifier: Apache-2.0
// Compressed ring allreduce (issue 29): float32 vectors travel as 16-bit
// floats (bf16 or fp16), or as int8 with one float32 scale per block of 256
// (the block's largest magnitude / 127), and are accumulated in float32 at
// every hop. The
// compression is inside the algorithm, not a pass before it: each
// reduce-scatter step sends the running partial sum of one segment, rounded
// to 16 bits, and the receiver adds its own float32 input to the widened
// value; the owner of a finished segment rounds it once and the allgather
// forwards those 16-bit values as they are, so every rank ends with the same
// bits. Half the bytes of the float32 ring cross the wire (bf16, fp16), or
// about a quarter (int8: 260 bytes per 256 values).
//
// Error feedback: every rounding this rank does (its sends in the
// reduce-scatter, its owned segment before the allgather) leaves a residual
// in a float32 vector kept per buffer; the next call adds the residual to
// this rank's input. Each rounding error is kept by exactly one rank, so over
// calls the results add up to the inputs' sum, off by the last residuals
// only (in sum units; an average's owner scales its error back up by n).
//
// Out of place, from kStreamOutputMinBytes, the output is written once, in
// the allgather, with streaming stores: the owner's last reduce-scatter step
// sums, averages and rounds kStreamPiece values at a time in a buffer that
// stays in L1 and keeps only the rounded values on the wire; the allgather
// widens each chunk it receives, and each chunk of the owner's own segment
// as it is posted, into that buffer and streams it out. The output's lines
// are then never read for ownership (64 MiB, 2 ranks, no link to wait on:
// int8 12 %, fp16 14 % faster), and the reduce-scatter, which waits on the
// CPU, leaves the owner's share of the writes to the allgather, which waits
// on the link (behind 10 Gbit/s: bf16 8 %, int8 6 % faster; docs/benchmarks.md).
// The same kernels on the same values as writing the output directly (what
// narrow keeps is what the wire widens to), so the same bits.
//
// The 2(n-1) steps run as one pipeline, a chunk going on as soon as the step
// before has made it, and the reduce-scatter's partial sums stay in L1
// between the chunk received and the chunk sent (64 MiB, 4 ranks behind 10
// Gbit/s: int8 20 %, bf16 6 % faster; docs/benchmarks.md).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/reduce.h"
#include "collectives/stream.h"
#include "collectives/compress_kernels.h"
#include "core/copy.h"

namespace grex::detail {
namespace {

// Values per streamed piece: 16 KiB of float32 (L1), whole int8 blocks.
constexpr size_t kStreamPiece = 4096;
static_assert(kStreamPiece % kInt8Block == 0);

// How a format lays values on the wire: blocks of `elems` values in `bytes`
// bytes (a last, shorter block: its header and the values it holds).
struct Format {
  Compression kind;
  size_t elems, bytes, header, per;
  explicit Format(Compression k) noexcept
      : kind(k),
        elems(k == Compression::kInt8 ? kInt8Block : 1),
        bytes(k == Compression::kInt8 ? kInt8Block + 4 : 2),
        header(k == Compression::kInt8 ? 4 : 0),
        per(k == Compression::kInt8 ? 1 : 2) {}
  size_t wire_bytes(size_t m) const noexcept {
    const size_t rem = m % elems;
    return m / elems * bytes + (rem > 0 ? header + rem * per : 0);
  }
  void narrow(const float* v, size_t m, uint8_t* w, float* res, float scale, float* back = nullptr) const noexcept {
    if (kind == Compression::kInt8) return int8_narrow(v, m, w, res, scale, back);
    narrow_f32(kind, v, m, reinterpret_cast<uint16_t*>(w), res, scale, back);
  }
  void widen_add(const uint8_t* w, size_t m, const float* a, const float* b, float* out) const noexcept {
    if (kind == Compression::kInt8) return int8_widen_add(w, m, a, b, out);
    grex::detail::widen_add(kind, reinterpret_cast<const uint16_t*>(w), m, a, b, out);
  }
  void widen(const uint8_t* w, size_t m, float* out) const noexcept {
    if (kind == Compression::kInt8) return int8_widen(w, m, out);
    grex::detail::widen(kind, reinterpret_cast<const uint16_t*>(w), m, out);
  }
};

}  // namespace

Result<void> compressed_ring_allreduce(Context& c, const Group& g, const CollArgs& a, Compression kind,
                                       float* residual, std::vector<uint8_t>* wire) {
  const Format fmt(kind);
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
  // Segment s: count/n elements, the first count%n one more; its wire bytes
  // from wo[s] (whole blocks, a last shorter one).
  std::vector<size_t> off(static_cast<size_t>(n)), cnt(static_cast<size_t>(n)), wo(static_cast<size_t>(n) + 1, 0);
  for (size_t s = 0, at = 0; s < static_cast<size_t>(n); ++s) {
    off[s] = at;
    cnt[s] = count / static_cast<size_t>(n) + (s < count % static_cast<size_t>(n) ? 1 : 0);
    at += cnt[s];
    wo[s + 1] = wo[s] + fmt.wire_bytes(cnt[s]);
  }
  auto mod = [n](int x) { return static_cast<size_t>(((x % n) + n) % n); };
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const size_t wire_total = wo[static_cast<size_t>(n)];
  wire->resize(std::max<size_t>(wire_total, 1));
  uint8_t* w = wire->data();
  // Chunks of whole blocks (a chunk's bytes start a block), holding about
  // as many values as a float32 chunk: the kernels read and write float32,
  // and a chunk of chunk_bytes on the wire held 4 x (int8) or 2 x (16-bit)
  // its size in floats, which left the cache between the widening and the
  // rounding of the last step (int8, 64 MiB, 2 ranks: 6 % slower).
  const size_t blocks = std::max<size_t>(1, c.opts->chunk_bytes / sizeof(float) / fmt.elems);
  const size_t chunk = blocks * fmt.bytes;
  const size_t chunk_elems = blocks * fmt.elems;
  GREX_TRY(c.bufs->ensure_scratch(chunk * kStreamWindow));
  ScopedRegistration wreg(*c.bufs);
  GREX_TRY(wreg.acquire(w, wire_total));
  const uint64_t woff = wreg.offset(w);
  // A chunk at wire byte o of segment s: its first element and how many.
  auto span_of = [&](size_t s, uint64_t o) {
    const size_t e = o / chunk * chunk_elems;
    return std::pair<size_t, size_t>{off[s] + e, std::min(chunk_elems, cnt[s] - e)};
  };

  // The ring runs as one pipeline (stream_steps): reduce-scatter step k
  // sends segment r-k and receives segment r-k-1, allgather step k sends
  // segment r+1-k and receives segment r-k, and each step's chunk j goes
  // out as soon as the step before has made it from its received chunk j,
  // not after the step's end. Step 0 sends this rank's own contribution,
  // each chunk rounded just before it is posted: its input, with feedback
  // plus the residual (summed a chunk at a time into a buffer of the
  // worker's thread). Every later reduce-scatter step adds this rank's
  // contribution to the widened partial sum of a received chunk in an L1
  // piece and rounds it into the wire buffer, which the next step sends:
  // the partial sums never reach memory.
  static thread_local std::vector<float> contribution;
  static thread_local std::vector<float> piece;
  piece.resize(kStreamPiece);
  const bool stream_out = a.send != a.recv && count * sizeof(float) >= kStreamOutputMinBytes;
  // m values at segment element e, from wire bytes `data` (i values in:
  // whole blocks, wire_bytes(i) bytes): add this rank's contribution, and
  // round into `dst`. The owner's last step (`last`) also averages and
  // rounds once for everyone (its rounding error, in sum units, is this
  // rank's to carry); its sums go to the output, which keeps the rounded
  // values, or with the output streamed to the L1 piece, and the allgather
  // writes the output.
  auto sum_round = [&](const uint8_t* data, size_t m, size_t e, float* res, uint8_t* dst, bool last) {
    const bool direct = last && !stream_out;
    const bool scaled = last && avg;
    for (size_t i = 0; i < m; i += kStreamPiece) {
      const size_t q = std::min(kStreamPiece, m - i), wb = fmt.wire_bytes(i);
      float* rr = res != nullptr ? res + i : nullptr;
      float* sum = direct ? out + e + i : piece.data();
      fmt.widen_add(data + wb, q, in + e + i, rr, sum);
      if (rr != nullptr) std::memset(rr, 0, q * sizeof(float));  // added in
      if (scaled) scale_avg(sum, q, DataType::kFloat32, n);
      fmt.narrow(sum, q, dst + wb, rr, scaled ? static_cast<float>(n) : 1.0f, direct ? sum : nullptr);
    }
  };
  auto widen_streaming = [&](const uint8_t* data, size_t m, size_t e) {
    for (size_t i = 0; i < m; i += kStreamPiece) {
      const size_t q = std::min(kStreamPiece, m - i);
      fmt.widen(data + fmt.wire_bytes(i), q, piece.data());
      copy_streaming_unfenced(out + e + i, piece.data(), q * sizeof(float));
    }
    streaming_fence();
  };
  // Step i (reduce-scatter k = i, then allgather k = i - (n - 1)): the
  // segment it sends and the one it receives. The reduce-scatter receives
  // into the scratch ring; the allgather into the wire buffer, and forwards
  // from there.
  const size_t nsteps = 2 * static_cast<size_t>(n - 1);
  const size_t rs_last = static_cast<size_t>(n - 2), ag_first = static_cast<size_t>(n - 1);
  auto send_seg = [&](size_t i) {
    const int k = static_cast<int>(i);
    return i < ag_first ? mod(r - k) : mod(r + n - k);
  };
  auto recv_seg = [&](size_t i) {
    const int k = static_cast<int>(i);
    return i < ag_first ? mod(r - k - 1) : mod(r + n - 1 - k);
  };
  std::vector<StreamStep> steps(nsteps);
  for (size_t i = 0; i < nsteps; ++i) {
    const size_t ss = send_seg(i), rs = recv_seg(i);
    const bool ag = i >= ag_first;
    const uint64_t tag = a.tag | (ag ? (1ull << 16) | (i - ag_first) : i);
    steps[i] = StreamStep{StreamSide{next, wreg.get(), woff + wo[ss], wo[ss + 1] - wo[ss]},
                          StreamSide{prev, ag ? wreg.get() : nullptr, ag ? woff + wo[rs] : 0, wo[rs + 1] - wo[rs]},
                          tag};
  }
  // At 2 ranks the allgather receives where the reduce-scatter sends from:
  // each receive waits for that chunk's send.
  GREX_TRY(stream_steps(
      c, g, steps, chunk, StreamChain{n == 2},
      [&](size_t i, size_t, const uint8_t* data, uint64_t o, uint64_t) {
        const size_t seg = recv_seg(i);
        const auto [e, m] = span_of(seg, o);
        if (i >= ag_first) {
          if (stream_out) return widen_streaming(data, m, e);
          return fmt.widen(data, m, out + e);
        }
        // Reduce-scatter: into the wire buffer, what step i + 1 sends.
        sum_round(data, m, e, residual != nullptr ? residual + e : nullptr, w + wo[seg] + o, i == rs_last);
      },
      [&](size_t i, uint64_t o, uint64_t) {
        const size_t seg = send_seg(i);
        const auto [e, m] = span_of(seg, o);
        if (i == ag_first) {  // the own segment, sent: its output too, while the link works
          if (stream_out) widen_streaming(w + wo[seg] + o, m, e);
          return;
        }
        if (i != 0) return;  // rounded as the step before received it
        uint8_t* dst = w + wo[seg] + o;
        float* res = residual != nullptr ? residual + e : nullptr;
        if (res == nullptr) return fmt.narrow(in + e, m, dst, nullptr, 1.0f);
        contribution.resize(m);
        for (size_t v = 0; v < m; ++v) contribution[v] = in[e + v] + res[v];
        std::memset(res, 0, m * sizeof(float));
        fmt.narrow(contribution.data(), m, dst, res, 1.0f);
      }));
  return ok();
}

}  // namespace grex::detail
