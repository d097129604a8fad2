// SPDX-License-Identifier: Apache-2.0
// The top-k allreduce's pairs, and how every rank adds them up
// (topk_allreduce.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace grex::detail {

/// One value a rank sends: where it is in the vector, and the value.
struct TopkPair {
  uint32_t index;
  float value;
};

/// Whether each rank's first counts[r] pairs (rank r's start at
/// all + r * most) come in increasing index order.
bool topk_ordered(const TopkPair* all, const uint32_t* counts, size_t most, size_t n) noexcept;

/// out[0..count) = the n ranks' pairs added in rank order into zeros,
/// divided by n_avg where n_avg > 0 (ReduceOp::kAvg); pairs at or past
/// `count` are left out. Ordered pairs (topk_ordered) take one pass over the
/// output, others the plain scatter: the same bits either way.
void topk_sum_pairs(float* out, size_t count, const TopkPair* all, const uint32_t* counts, size_t most, size_t n,
                    int n_avg);

}  // namespace grex::detail
