// SPDX-License-Identifier: Apache-2.0
// RTTCC's linear rule for rare samplers (ztr set): its step, its bounds, and
// where the other rules apply instead (the rest: cc_rttcc_test.cc).
#include <gtest/gtest.h>

#include <algorithm>

#include "cc_harness.h"
#include "congestion/cc.h"

namespace grex::cc {
namespace {

// A rare sampler (samples >= 4 RTTs apart) past its first congestion, its RTT
// and the previous one within the max delay: rate x (1 - g ((RTT - aim) +
// (RTT - previous)) / interval), aim = target + 0.014 x interval, within
// [x0.97, x1.06]; past the max delay, or for a flow that samples every RTT,
// the other rules as before.
TEST(RttccZtr, ARareSamplerBelowTheMaxDelayFollowsTheLinearRule) {
  Options o = no_flow_scaling();
  o.rttcc.linear_gain = Options{}.rttcc.linear_gain;
  o.rttcc.start_rate_fraction = 1e-4;
  Options off = o;
  off.rttcc.linear_gain = 0;
  Harness h("rttcc", o), g("rttcc", off);
  const uint64_t dt = 5'000 * kUs;
  const double aim_us = 13 + o.rttcc.linear_aim_interval_fraction * 5'000;  // 83 us
  uint64_t t = 0;
  auto both = [&](uint64_t rtt_us) {
    t += dt;
    h.rtt(t, rtt_us * kUs);
    g.rtt(t, rtt_us * kUs);
  };
  both(100);  // first congestion: the same cut for both
  ASSERT_DOUBLE_EQ(h.rate(), g.rate());
  double r = h.rate();
  both(150);  // rising: (150 - 83) + (150 - 100) over 5000 us
  EXPECT_NEAR(h.rate(), r * (1 - ((150 - aim_us) + 50) / 5'000), 1e-3);
  r = h.rate();
  both(100);  // above the aim but falling fast: an increase, where the hold would leave it
  EXPECT_NEAR(h.rate(), r * (1 - ((100 - aim_us) - 50) / 5'000), 1e-3);
  EXPECT_GT(h.rate(), r);
  r = h.rate();
  both(240);  // a large rise: 1 - 297/5000, bounded at x0.97
  EXPECT_NEAR(h.rate(), r * o.rttcc.min_change, 1e-3);
  r = h.rate();
  both(20);  // a large fall: 1 + 283/5000
  EXPECT_NEAR(h.rate(), r * (1 - ((20 - aim_us) - 220) / 5'000), 1e-3);
  // Past the max delay the usual rules take over: both flows move alike.
  const double rh = h.rate(), rg = g.rate();
  both(400);
  EXPECT_NEAR(h.rate() / rh, g.rate() / rg, 1e-9);
  both(300);
  EXPECT_NEAR(h.rate() / rh, g.rate() / rg, 1e-9);  // the previous RTT was past it
  // Increases are bounded at x1.06: 1 ms apart (aim 27 us), from 200 us to 20 us.
  Harness k("rttcc", o);
  k.rtt(1'000 * kUs, 100 * kUs);  // first congestion
  k.rtt(2'000 * kUs, 200 * kUs);
  r = k.rate();
  k.rtt(3'000 * kUs, 20 * kUs);
  EXPECT_NEAR(k.rate(), r * o.rttcc.max_change, 1e-3);
}

// Once linear_calm_run (5) samples in a row called for an increase, the
// usual increase (with the time term, escalating per calm sample) applies
// when it allows more; a decrease ends the run.
TEST(RttccZtr, TheLinearRulesCalmRunBringsBackTheUsualClimb) {
  Options o = no_flow_scaling();
  o.rttcc.linear_gain = Options{}.rttcc.linear_gain;
  o.rttcc.start_rate_fraction = 1e-4;
  Harness h("rttcc", o);
  const uint64_t dt = 5'000 * kUs;
  uint64_t t = 0;
  h.rtt(t += dt, 100 * kUs);  // first congestion
  h.rtt(t += dt, 60 * kUs);   // 1st increase
  double prev = 60;
  for (int i = 2; i <= 6; ++i) {
    const double r = h.rate();
    h.rtt(t += dt, 59 * kUs);  // just below the aim (83 us), flat
    const double linear = 1 - ((59 - 83.0) + (59 - prev)) / 5'000;
    prev = 59;
    if (i < 5) EXPECT_NEAR(h.rate() / r, linear, 1e-9) << i;
    else EXPECT_GT(h.rate() / r, linear + 1e-6) << i;  // the time term allows more for a flow this slow
  }
  const double r = h.rate();
  h.rtt(t += dt, 120 * kUs);  // a decrease ends the run
  EXPECT_LT(h.rate(), r);
  const double r2 = h.rate();
  h.rtt(t += dt, 59 * kUs);
  EXPECT_NEAR(h.rate() / r2, 1 - ((59 - 83.0) + (59 - 120.0)) / 5'000, 1e-9);
}

// A flow that samples every RTT, and the drivers' settings (whose sample
// intervals include idle spells), never take the linear rule.
TEST(RttccZtr, TheLinearRuleIsForRareSamplersOnly) {
  Options o = no_flow_scaling();
  o.rttcc.linear_gain = Options{}.rttcc.linear_gain;
  Options off = o;
  off.rttcc.linear_gain = 0;
  Harness h("rttcc", o), g("rttcc", off);
  uint64_t t = 0;
  for (uint64_t rtt_us : {30, 40, 35, 20, 50, 45, 10, 12}) {  // every RTT
    t += rtt_us * kUs;
    h.rtt(t, rtt_us * kUs);
    g.rtt(t, rtt_us * kUs);
    EXPECT_DOUBLE_EQ(h.rate(), g.rate()) << rtt_us;
  }
  Options d;
  use_software_timestamps(&d, 50'000);
  EXPECT_EQ(d.rttcc.linear_gain, 0);
  EXPECT_GT(Options{}.rttcc.linear_gain, 0);
}

}  // namespace
}  // namespace grex::cc
