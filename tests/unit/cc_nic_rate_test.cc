// SPDX-License-Identifier: Apache-2.0
// NicRateLimit: which per-QP limit the verbs driver hands the NIC for a
// controller's rate, and when.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "congestion/nic_rate.h"

namespace grex::cc {
namespace {

constexpr double kLine = 100e9;
constexpr uint64_t kInterval = 500'000;

NicRateLimit offered(uint32_t min_kbps = 1'000, uint32_t max_kbps = 100'000'000) {
  NicRateLimit n;
  n.reset({min_kbps, max_kbps}, kLine, kInterval);
  return n;
}

TEST(NicRateLimit, NotOfferedNeverProgramsAndSendsAtLineRate) {
  NicRateLimit n;
  n.reset({}, kLine, kInterval);
  EXPECT_FALSE(n.active());
  EXPECT_EQ(n.next_kbps(1e9, 0), -1);
  EXPECT_EQ(n.next_kbps(1e9, 10 * kInterval), -1);
  EXPECT_EQ(n.send_bps(), kLine);
}

TEST(NicRateLimit, TheFirstLimitIsOneGridLevelAboveTheRate) {
  NicRateLimit n = offered();
  const int64_t k = n.next_kbps(10e9, 0);
  ASSERT_GT(k, 0);
  EXPECT_GT(k, 10'000'000);                                  // never below the controller's rate
  EXPECT_LE(k, 10'000'000 * std::exp2(2.0 / 16) + 1);        // at most two levels above
  n.programmed(static_cast<uint32_t>(k), 0);
  EXPECT_EQ(n.kbps(), k);
  EXPECT_EQ(n.updates(), 1u);
  EXPECT_DOUBLE_EQ(n.send_bps(), static_cast<double>(k) * 1e3);
}

TEST(NicRateLimit, RatesShareAFewLevels) {
  // mlx5-class NICs keep a small table of distinct rates: 1000 rates spread
  // over one octave map to the grid's 16 (or 17) levels.
  NicRateLimit n = offered();
  std::set<uint32_t> levels;
  for (int i = 0; i < 1000; ++i) levels.insert(n.level_kbps(5e9 * (1 + i / 1000.0)));
  EXPECT_LE(levels.size(), 17u);
  EXPECT_GE(levels.size(), 16u);
}

TEST(NicRateLimit, NearTheLineOrPastTheNicsMaximumMeansNoLimit) {
  NicRateLimit n = offered(1'000, 50'000'000);
  EXPECT_EQ(n.level_kbps(kLine), 0u);
  EXPECT_EQ(n.level_kbps(98e9), 0u);  // its level is past the line
  EXPECT_EQ(n.level_kbps(60e9), 0u);  // past what the NIC can limit to
  EXPECT_GT(n.level_kbps(40e9), 0u);
  // A queue never limited is not told "no limit" (a firmware command for nothing).
  EXPECT_EQ(n.next_kbps(kLine, 0), -1);
  const int64_t k = n.next_kbps(40e9, 0);
  ASSERT_GT(k, 0);
  n.programmed(static_cast<uint32_t>(k), 0);
  EXPECT_EQ(n.next_kbps(kLine, kInterval), 0);  // once limited, it is lifted
}

TEST(NicRateLimit, BelowTheNicsMinimumTakesTheMinimum) {
  NicRateLimit n = offered(1'000);
  EXPECT_EQ(n.next_kbps(100e3, 0), 1'000);  // the software bucket paces the rest
}

TEST(NicRateLimit, WaitsTheIntervalBetweenUpdates) {
  NicRateLimit n = offered();
  n.programmed(static_cast<uint32_t>(n.next_kbps(1e9, 0)), 0);
  EXPECT_EQ(n.next_kbps(2e9, kInterval / 2), -1);  // the rate doubled, but too soon
  const int64_t k = n.next_kbps(2e9, kInterval);
  EXPECT_GT(k, 2'000'000);
}

TEST(NicRateLimit, ALimitAboveTheRateComesDownOnlyPastTheSlack) {
  NicRateLimit n = offered();
  const auto k = static_cast<uint32_t>(n.next_kbps(10e9, 0));
  n.programmed(k, 0);
  // 5 % lower: the limit is still within 2^(4/16) of the rate, harmless.
  EXPECT_EQ(n.next_kbps(9.5e9, 2 * kInterval), -1);
  // 20 % lower: reprogrammed, one level above the new rate.
  const int64_t down = n.next_kbps(8e9, 2 * kInterval);
  EXPECT_GT(down, 8'000'000);
  EXPECT_LT(down, k);
}

TEST(NicRateLimit, ALimitBelowTheRateGoesUpAtOnce) {
  NicRateLimit n = offered();
  const auto k = static_cast<uint32_t>(n.next_kbps(10e9, 0));
  n.programmed(k, 0);
  EXPECT_EQ(n.next_kbps(k * 1e3 * 0.999, kInterval), -1);  // still under the limit
  const int64_t up = n.next_kbps(k * 1e3 * 1.01, kInterval);  // past it: the NIC would hold the flow back
  EXPECT_GT(up, k);
  n.programmed(static_cast<uint32_t>(up), kInterval);
  // and back to no limit once the rate nears the line
  EXPECT_EQ(n.next_kbps(kLine, 2 * kInterval), 0);
}

TEST(NicRateLimit, ARefusalEndsIt) {
  NicRateLimit n = offered();
  n.programmed(static_cast<uint32_t>(n.next_kbps(10e9, 0)), 0);
  n.refused();
  EXPECT_FALSE(n.active());
  EXPECT_EQ(n.next_kbps(1e9, 10 * kInterval), -1);
  EXPECT_LT(n.send_bps(), kLine);  // the last limit holds until cleared
  n.programmed(0, 10 * kInterval);
  EXPECT_EQ(n.send_bps(), kLine);
}

}  // namespace
}  // namespace grex::cc
