// SPDX-License-Identifier: Apache-2.0
// Top-k allreduce (issue 29): each rank sends only its largest `fraction` of
// values, as (index, value) pairs, to every other rank (an allgather of the
// pairs, padded to the largest count), and every rank adds all ranks' pairs
// into a zeroed output in rank order, so every rank gets the same bits.
// Selection keeps every value at or above a magnitude threshold taken from a
// sample (one pass, no sort of the vector), at most 1.5 x fraction x count
// of them. With error feedback the values not sent stay in the residual and
// join the next call's input; the values sent leave none. fraction 1 sends
// every value: the exact sum (added in rank order).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "collectives/comm_impl.h"
#include "collectives/reduce.h"

namespace grex::detail {

Result<void> topk_allreduce(Communicator::Impl& c, const float* in, float* out, size_t count, ReduceOp op,
                            double fraction, float* residual) {
  if (count > UINT32_MAX) return bad_arg(c.rank, "top-k allreduce", "more than 2^32 - 1 values");
  const auto n = static_cast<size_t>(c.size);
  auto value = [&](size_t i) { return residual != nullptr ? in[i] + residual[i] : in[i]; };
  // The threshold: the (1 - fraction) quantile of the magnitudes of a sample.
  const bool all = fraction >= 1.0;
  float thr = 0.f;
  if (!all && count > 0) {
    const size_t stride = std::max<size_t>(1, count / 65536);
    std::vector<float> sample;
    sample.reserve(count / stride + 1);
    for (size_t i = 0; i < count; i += stride) sample.push_back(std::fabs(value(i)));
    const auto k = static_cast<size_t>(std::ceil(fraction * static_cast<double>(sample.size())));
    const size_t pos = sample.size() - std::min(std::max<size_t>(k, 1), sample.size());
    std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(pos), sample.end());
    thr = sample[pos];
  }
  const size_t cap = all ? count
                         : std::min(count, static_cast<size_t>(std::ceil(1.5 * fraction * static_cast<double>(count))) + 16);
  // Select and pack; what is not sent stays in the residual.
  struct Pair {
    uint32_t index;
    float value;
  };
  static thread_local std::vector<Pair> mine, everyone;
  mine.clear();
  mine.reserve(cap);
  for (size_t i = 0; i < count; ++i) {
    const float v = value(i);
    const bool send = mine.size() < cap && (all || (std::fabs(v) >= thr && v != 0.f));
    if (send) mine.push_back(Pair{static_cast<uint32_t>(i), v});
    if (residual != nullptr) residual[i] = send ? 0.f : v;
  }
  // Every rank's count, then every rank's pairs padded to the largest.
  std::vector<uint32_t> counts(n);
  uint32_t my_count = static_cast<uint32_t>(mine.size());
  GREX_TRY(c.run_first(Coll::kAllgather, CollArgs{&my_count, counts.data(), sizeof(uint32_t), DataType::kUint8}));
  const size_t most = *std::max_element(counts.begin(), counts.end());
  mine.resize(most, Pair{UINT32_MAX, 0.f});
  everyone.resize(most * n);
  if (most > 0)
    GREX_TRY(c.run_first(Coll::kAllgather,
                         CollArgs{mine.data(), everyone.data(), most * sizeof(Pair), DataType::kUint8}));
  std::memset(out, 0, count * sizeof(float));
  for (size_t r = 0; r < n; ++r)
    for (size_t j = 0; j < counts[r]; ++j) {
      const Pair& p = everyone[r * most + j];
      if (p.index < count) out[p.index] += p.value;
    }
  if (op == ReduceOp::kAvg) scale_avg(out, count, DataType::kFloat32, c.size);
  return ok();
}

}  // namespace grex::detail
