// SPDX-License-Identifier: Apache-2.0
// The alpha-beta-gamma cost model that picks an allreduce algorithm per call:
// alpha per message, beta per byte on the wire, gamma per byte reduced.
#pragma once

#include <grex/result.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace grex::detail {

enum class Algo : unsigned char { kRing, kRabenseifner, kRecursiveDoubling, kTree, kDirect, kFlat, kHierarchical };
/// The message algorithms the model weighs (direct stands in for ring and
/// Rabenseifner where preferred; flat is chosen by size before the model).
inline constexpr Algo kAllAlgos[] = {Algo::kRing, Algo::kRabenseifner, Algo::kRecursiveDoubling, Algo::kTree};

/// "ring", "rabenseifner", "recursive_doubling", "tree", "direct", "flat", "hierarchical".
const char* algo_name(Algo a) noexcept;
/// Parses a name (also "rd", "rab"); nullopt if unknown.
std::optional<Algo> parse_algo(std::string_view s) noexcept;

struct CostModel {
  double alpha_s = 10e-6;           ///< per message
  double beta_s_per_byte = 1e-10;   ///< per byte sent (1 / bandwidth)
  double gamma_s_per_byte = 1e-10;  ///< per byte reduced (1 / reduction speed)

  /// Predicted seconds for one allreduce of `bytes` over n ranks.
  double allreduce_s(Algo a, int n, double bytes) const noexcept;
  /// The algorithm with the least predicted time (ties: ring). With `direct`
  /// (the device reads and writes peers' memory with CPU copies, shm), the
  /// direct algorithm takes the place of the two bandwidth-optimal message
  /// schedules, ring and Rabenseifner: it moves the same bytes with fewer
  /// passes over memory, which the model does not see, and more round trips
  /// (4 alpha: its rounds go to all peers at once), which it does.
  Algo choose_allreduce(int n, size_t bytes, bool direct = false) const noexcept;
  /// "alpha_us=.. beta_gbps=.. gamma_gbps=.." (the GREX_COST format).
  std::string describe() const;
  /// Parses GREX_COST: "ALPHA_US,BETA_GBPS,GAMMA_GBPS" (GB/s = 1e9 bytes per second).
  static Result<CostModel> parse(std::string_view s);
};

}  // namespace grex::detail
