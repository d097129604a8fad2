// SPDX-License-Identifier: Apache-2.0
// Algorithm choice: which allreduce runs a call (GREX_ALGO where forced, the
// flat slots where the vector fits them, else the cost model).
#pragma once

#include <cstddef>
#include <optional>

#include "collectives/algorithm.h"
#include "collectives/cost_model.h"

namespace grex::detail {

/// One per group it chooses for (the memo assumes the same group).
class Selector {
 public:
  CostModel cost;
  std::optional<Algo> forced;  // GREX_ALGO

  /// Every member answers alike: the inputs are the same everywhere.
  Algo allreduce(const Context& c, const Group& g, size_t bytes) const noexcept {
    const CollArgs probe{nullptr, nullptr, bytes, DataType::kUint8, ReduceOp::kSum, 0, 0};
    const bool flat = flat_usable(c, g, probe);
    if (forced && (*forced != Algo::kFlat || flat)) return *forced;
    if (!forced && flat) return Algo::kFlat;
    const bool direct = direct_usable(c, g, probe) && c.capabilities().allocate_shared;
    const Algo best = cost.choose_allreduce(g.size(), bytes, direct);
    // Across hosts: the two-level schedule where its model beats the flat one's.
    if (hierarchical_usable(c, g, probe) &&
        hierarchical_allreduce_s(c, bytes) < cost.allreduce_s(best, g.size(), static_cast<double>(bytes)))
      return Algo::kHierarchical;
    return best;
  }
  /// The same inside a running collective: training loops repeat sizes, so
  /// the last answer is remembered.
  Algo allreduce_memo(const Context& c, const Group& g, size_t bytes) noexcept {
    if (bytes != memo_bytes_) {
      memo_ = allreduce(c, g, bytes);
      memo_bytes_ = bytes;
    }
    return memo_;
  }

 private:
  size_t memo_bytes_ = ~size_t{0};
  Algo memo_ = Algo::kRing;
};

}  // namespace grex::detail
