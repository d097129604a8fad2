// SPDX-License-Identifier: Apache-2.0
// Top-k allreduce (issue 29): each rank sends only its largest `fraction` of
// values, as (index, value) pairs, to every other rank (an allgather of the
// pairs, padded to the largest count), and every rank adds all ranks' pairs
// into a zeroed output in rank order, so every rank gets the same bits.
// Selection keeps every value at or above a magnitude threshold taken from a
// sample (one pass, no sort of the vector), at most 1.5 x fraction x count
// of them. With error feedback the values not sent stay in the residual and
// join the next call's input; the values sent leave none. fraction 1 sends
// every value: the exact sum (added in rank order). At most 2^32 - 1 values
// (32-bit indices; compressed_api.cc checks).
//
// Across hosts (topk_rail_allreduce), the hierarchical allreduce runs the
// same steps on each rail, on its shard of the host's exact float32 sum:
// each host selects from what its ranks sent together, so a value two of its
// ranks cancel is never sent, and each rank's pairs cross only to its rail.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/comm_impl.h"
#include "collectives/reduce.h"
#include "collectives/reduce_simd.h"
#include "collectives/topk_pairs.h"
#include "core/copy.h"

namespace grex::detail {
namespace {

using Pair = TopkPair;

// Appends (i, v) for every v = in[i] (+ res[i]) with |v| >= thr and v != 0
// (every v when `all`), at most `cap` in all, in index order; res[i] becomes
// v where it was not sent, 0 where it was. The scalar form, and below the
// AVX2 one that tests 8 values at a time (the same choices: the same
// comparisons in the same order).
void select_scalar(const float* in, float* res, size_t from, size_t to, bool all, float thr, size_t cap,
                   std::vector<Pair>& out) {
  size_t i = from;
  for (; i < to && out.size() < cap; ++i) {
    const float v = res != nullptr ? in[i] + res[i] : in[i];
    const bool send = all || (std::fabs(v) >= thr && v != 0.f);
    if (send) out.push_back(Pair{static_cast<uint32_t>(i), v});
    if (res != nullptr) res[i] = send ? 0.f : v;
  }
  // The cap is reached (many values tie at the threshold): the rest all stay.
  if (res != nullptr)
    for (; i < to; ++i) res[i] = in[i] + res[i];
}

#if GREX_REDUCE_X86
GREX_TARGET_BEGIN("avx2")
size_t select_avx2(const float* in, float* res, size_t count, float thr, size_t cap, std::vector<Pair>& out) {
  const __m256 sign = _mm256_set1_ps(-0.f), t = _mm256_set1_ps(thr), zero = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= count && out.size() + 8 <= cap; i += 8) {
    __m256 v = _mm256_loadu_ps(in + i);
    if (res != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(res + i));
    const __m256 big = _mm256_and_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v), t, _CMP_GE_OQ),
                                     _mm256_cmp_ps(v, zero, _CMP_NEQ_OQ));
    unsigned bits = static_cast<unsigned>(_mm256_movemask_ps(big));
    if (res != nullptr) _mm256_storeu_ps(res + i, _mm256_blendv_ps(v, zero, big));
    if (bits != 0) {
      alignas(32) float lane[8];
      _mm256_store_ps(lane, v);
      for (; bits != 0; bits &= bits - 1) {
        const int j = __builtin_ctz(bits);
        out.push_back(Pair{static_cast<uint32_t>(i + static_cast<size_t>(j)), lane[j]});
      }
    }
  }
  return i;  // the rest (a tail, or near the cap) goes element by element
}
GREX_TARGET_END
#endif

// The pairs' storage, kept per thread across calls. Not inlined: inlined,
// the compiler looked the thread's storage up again (__tls_get_addr) at
// every use in the loops, 5 % of a 64 MiB call.
struct Scratch {
  std::vector<Pair> mine, everyone;
};
[[gnu::noinline]] Scratch& thread_scratch() {
  static thread_local Scratch s;
  return s;
}

}  // namespace

// Whether each rank's first counts[r] pairs come in increasing index order
// (select's order; a peer's pairs are checked, not trusted).
bool topk_ordered(const TopkPair* all, const uint32_t* counts, size_t most, size_t n) noexcept {
  for (size_t r = 0; r < n; ++r) {
    const TopkPair* p = all + r * most;
    for (size_t j = 1; j < counts[r]; ++j)
      if (p[j].index <= p[j - 1].index) return false;
  }
  return true;
}

// out = every rank's pairs added in rank order, zero elsewhere (divided by
// n_avg where > 0). With every rank's pairs in index order, one pass writes
// the output: each block is summed in a buffer that stays in cache, then
// written out, with streaming stores where the output is large. (Zeroing the
// whole output and then adding the pairs into it read back every line that
// holds a value: 54 % of a 64 MiB top-k call's time went to the zeroing and
// 18 % to the adding, both ranks of a host sharing memory's bandwidth.) The
// sums are the same, in the same order, as adding into a zeroed output.
void topk_sum_pairs(float* out, size_t count, const TopkPair* all, const uint32_t* counts, size_t most, size_t n,
                    int n_avg) {
  if (!topk_ordered(all, counts, most, n)) {
    std::memset(out, 0, count * sizeof(float));
    for (size_t r = 0; r < n; ++r)
      for (size_t j = 0; j < counts[r]; ++j) {
        const TopkPair& p = all[r * most + j];
        if (p.index < count) out[p.index] += p.value;
      }
    if (n_avg > 0) scale_avg(out, count, DataType::kFloat32, n_avg);
    return;
  }
  constexpr size_t kBlock = 16384;  // floats (64 KiB, within L2), a multiple of every vector width
  const bool streaming = count * sizeof(float) >= kStreamOutputMinBytes;
  std::vector<float> buf(std::min(count, kBlock));  // zero, and zero again after each block
  std::vector<size_t> next(2 * n, 0);               // per rank: its first pair of the block, and past it
  for (size_t b = 0; b < count; b += kBlock) {
    const size_t len = std::min(kBlock, count - b);
    for (size_t r = 0; r < n; ++r) {
      const TopkPair* p = all + r * most;
      size_t j = next[2 * r] = next[2 * r + 1];
      for (; j < counts[r] && p[j].index < b + len; ++j) buf[p[j].index - b] += p[j].value;
      next[2 * r + 1] = j;
    }
    if (n_avg > 0) scale_avg(buf.data(), len, DataType::kFloat32, n_avg);
    if (streaming)
      copy_streaming_unfenced(out + b, buf.data(), len * sizeof(float));
    else
      std::memcpy(out + b, buf.data(), len * sizeof(float));
    // Zero again where the pairs wrote (a hundredth of the block at 1 %).
    for (size_t r = 0; r < n; ++r)
      for (size_t j = next[2 * r]; j < next[2 * r + 1]; ++j) buf[all[r * most + j].index - b] = 0.f;
  }
  // One fence for every block: a fence a block drained each block's stores
  // before the next block's sums could start.
  if (streaming) streaming_fence();
}

namespace {

// An allgather of `bytes` from each of the n members: kth call of the
// top-k (0: the counts, 1: the pairs).
using PairsAllgather = std::function<Result<void>(int kth, const void* send, void* recv, size_t bytes)>;

// The top-k sum over n members of in[0..count) (+ residual) into out (which
// may be in): select, allgather the counts and the pairs, add them in
// member order. n_avg > 0 divides by it (ReduceOp::kAvg).
Result<void> topk_sum(size_t n, const float* in, float* out, size_t count, double fraction, float* residual,
                      int n_avg, const PairsAllgather& allgather) {
  auto value = [&](size_t i) { return residual != nullptr ? in[i] + residual[i] : in[i]; };
  // The threshold: the (1 - fraction) quantile of the magnitudes of a
  // sample, about 65536 values in runs of 16 (a cache line each), the runs
  // evenly spaced. (One value every count / 65536 read a line for each
  // value: 12 % of a 64 MiB call.)
  const bool all = fraction >= 1.0;
  float thr = 0.f;
  if (!all && count > 0) {
    constexpr size_t kRun = 16;
    const size_t stride = std::max<size_t>(kRun, count / 65536 * kRun);
    std::vector<float> sample;
    sample.reserve((count / stride + 1) * kRun);
    for (size_t i = 0; i < count; i += stride)
      for (size_t k = i; k < std::min(count, i + kRun); ++k) sample.push_back(std::fabs(value(k)));
    const auto k = static_cast<size_t>(std::ceil(fraction * static_cast<double>(sample.size())));
    const size_t pos = sample.size() - std::min(std::max<size_t>(k, 1), sample.size());
    std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(pos), sample.end());
    thr = sample[pos];
  }
  const size_t cap = all ? count
                         : std::min(count, static_cast<size_t>(std::ceil(1.5 * fraction * static_cast<double>(count))) + 16);
  // Select and pack; what is not sent stays in the residual.
  Scratch& scratch = thread_scratch();
  std::vector<Pair>& mine = scratch.mine;
  std::vector<Pair>& everyone = scratch.everyone;
  mine.clear();
  mine.reserve(cap);
  size_t done = 0;
#if GREX_REDUCE_X86
  if (!all && simd_level() != SimdLevel::kScalar) done = select_avx2(in, residual, count, thr, cap, mine);
#endif
  select_scalar(in, residual, done, count, all, thr, cap, mine);
  // Every rank's count, then every rank's pairs padded to the largest.
  std::vector<uint32_t> counts(n);
  uint32_t my_count = static_cast<uint32_t>(mine.size());
  GREX_TRY(allgather(0, &my_count, counts.data(), sizeof(uint32_t)));
  const size_t most = *std::max_element(counts.begin(), counts.end());
  mine.resize(most, Pair{UINT32_MAX, 0.f});
  everyone.resize(most * n);
  if (most > 0) GREX_TRY(allgather(1, mine.data(), everyone.data(), most * sizeof(Pair)));
  topk_sum_pairs(out, count, everyone.data(), counts.data(), most, n, n_avg);
  return ok();
}

}  // namespace

Result<void> topk_allreduce(Communicator::Impl& c, const float* in, float* out, size_t count, ReduceOp op,
                            double fraction, float* residual) {
  return topk_sum(static_cast<size_t>(c.size), in, out, count, fraction, residual,
                  op == ReduceOp::kAvg ? c.size : 0, [&c](int, const void* send, void* recv, size_t bytes) {
                    return c.run_first(Coll::kAllgather, CollArgs{send, recv, bytes, DataType::kUint8});
                  });
}

Result<void> topk_rail_allreduce(Context& c, const Group& g, const CollArgs& a, double fraction, float* residual) {
  // The rail's two allgathers share the call's tag base: the pairs' steps
  // above the counts' (a ring's step k adds k; fewer than 2^16 hosts).
  return topk_sum(static_cast<size_t>(g.size()), static_cast<const float*>(a.send), static_cast<float*>(a.recv),
                  a.count, fraction, residual, 0, [&](int kth, const void* send, void* recv, size_t bytes) {
                    const CollArgs ga{send, recv, bytes, DataType::kUint8, ReduceOp::kSum, 0,
                                      a.tag | (static_cast<uint64_t>(kth) << 16)};
                    return ring_allgather(c, g, ga);
                  });
}

}  // namespace grex::detail
