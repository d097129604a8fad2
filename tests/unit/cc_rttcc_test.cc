// SPDX-License-Identifier: Apache-2.0
// RTTCC fed deterministic RTT traces: each rule of both parameter sets
// (template, ztr) with its exact step, its bounds and its reaction to
// timeouts and NACKs, and ztr's slow start and window.
#include <gtest/gtest.h>

#include <algorithm>

#include "cc_harness.h"
#include "congestion/cc.h"

namespace grex::cc {
namespace {

// ---------------------------------------------------------------- RTTCC template

TEST(RttccTemplate, EachRuleAppliesItsFactor) {
  Harness h("rttcc-template");
  double r = h.rate();
  EXPECT_DOUBLE_EQ(r, kLine);  // NEW_FLOW_RATE: line rate
  h.rtt(10 * kUs, 20 * kUs);   // above base 13 us: x0.9
  EXPECT_NEAR(h.rate(), r * 0.9, 1);
  r = h.rate();
  h.rtt(20 * kUs, 150 * kUs);  // at max delay: x0.8
  EXPECT_NEAR(h.rate(), r * 0.8, 1);
  r = h.rate();
  h.flow->on_cnp(25 * kUs);  // CNP flag, applied at the next sample even with a low RTT
  h.rtt(30 * kUs, 5 * kUs);
  EXPECT_NEAR(h.rate(), r * 0.8, 1);
  r = h.rate();
  h.flow->on_nack(35 * kUs);  // NACK past max delay: x0.5
  h.rtt(40 * kUs, 200 * kUs);
  EXPECT_NEAR(h.rate(), r * 0.5, 1);
  r = h.rate();
  h.rtt(50 * kUs, 5 * kUs);  // below base: + 5 % of line rate
  EXPECT_NEAR(h.rate(), r + 0.05 * kLine, 1);
  r = h.rate();
  h.rtt(60 * kUs, 20 * kUs, 0.9);  // above 85 % port utilisation: decreases doubled
  EXPECT_NEAR(h.rate(), r * 0.8, 1);
  r = h.rate();
  h.rtt(70 * kUs, 160 * kUs, 0.9);
  EXPECT_NEAR(h.rate(), r * 0.6, 1);
}

TEST(RttccTemplate, StaysWithinMinAndLineRate) {
  Harness h("rttcc-template");
  for (int i = 0; i < 200; ++i) h.rtt(static_cast<uint64_t>(i) * 10 * kUs, 500 * kUs);
  EXPECT_DOUBLE_EQ(h.rate(), kLine / 16384);  // MIN_RATE: 2^-14 of line rate
  for (int i = 200; i < 400; ++i) h.rtt(static_cast<uint64_t>(i) * 10 * kUs, 1 * kUs);
  EXPECT_DOUBLE_EQ(h.rate(), kLine);
}

// The base RTT is a setting of the path: the template takes it from
// Options::rttcc_template, which use_software_timestamps() (the drivers) sets
// as it sets the ztr set's target. A 40 us sample is congestion against the
// default 13 us, and calm against a 50 us base.
TEST(RttccTemplate, TakesItsBaseRttFromThePathSettings) {
  Harness plain("rttcc-template");
  Options o;
  cc::use_software_timestamps(&o, 50'000);
  EXPECT_EQ(o.rttcc.target_delay_ns, 50'000u);
  EXPECT_EQ(o.rttcc_template.target_delay_ns, 50'000u);
  EXPECT_EQ(o.rttcc_template.max_delay_ns, 200'000u);  // 4 targets, above the template's 150 us
  o.rttcc_template.start_rate_fraction = 0.5;
  Harness path("rttcc-template", o);
  const double r0 = plain.rate(), r1 = path.rate();
  plain.rtt(10 * kUs, 40 * kUs);
  path.rtt(10 * kUs, 40 * kUs);
  EXPECT_NEAR(plain.rate(), r0 * 0.9, 1);            // above 13 us: x0.9
  EXPECT_NEAR(path.rate(), r1 + 0.05 * kLine, 1);    // below 50 us: + 5 % of line rate
}

// DOCA's template starts at line rate and keeps no window (slow start and
// the window are the ztr set's).
TEST(RttccTemplate, HasNoWindow) {
  Harness h("rttcc-template");
  uint64_t t = 0;
  for (uint64_t rtt : {5, 30, 200, 5}) {
    EXPECT_EQ(h.flow->decision().window_bytes, 0u);
    h.rtt(t += 10 * kUs, rtt * kUs);
  }
  EXPECT_EQ(h.flow->decision().window_bytes, 0u);
}

// ---------------------------------------------------------------- RTTCC ztr

// The rate rules below are tested on flows past slow start (tested on its
// own further down), one at a time (rate_rules(), cc_harness.h); the linear
// rule has its own tests (cc_rttcc_linear_test.cc).

TEST(RttccZtr, IncreasesAreBoundedAndHyperIncreaseNeedsCalm) {
  Options o = rate_rules();
  o.rttcc.start_rate_fraction = 0.1;
  Harness h("rttcc", o);
  const double ai = o.rttcc.ai_fraction * kLine, hai = o.rttcc.hai_fraction * kLine;
  double r = h.rate();
  h.rtt(10 * kUs, 5 * kUs);  // small AI
  EXPECT_NEAR(h.rate(), r + ai, 1);
  // 200 us without congestion: one hyper-increase step on top.
  r = h.rate();
  h.rtt(210 * kUs, 5 * kUs);
  EXPECT_NEAR(h.rate(), r + ai + hai, 1);
  r = h.rate();
  h.rtt(220 * kUs, 5 * kUs);  // the next one only after another period
  EXPECT_NEAR(h.rate(), r + ai, 1);
  r = h.rate();
  h.rtt(411 * kUs, 5 * kUs);  // the second period in a row: two steps
  EXPECT_NEAR(h.rate(), r + ai + 2 * hai, 1);
  // Far below the line rate the steps grow until the x1.06 bound holds them.
  for (uint64_t t = 600; t < 20'000; t += 200) h.rtt(t * kUs, 5 * kUs);
  r = h.rate();
  h.rtt(20'001 * kUs, 5 * kUs);
  EXPECT_NEAR(h.rate(), std::min(kLine, r * 1.06), 1);
  // Congestion resets the escalation.
  h.rtt(20'100 * kUs, 30 * kUs);
  r = h.rate();
  h.rtt(20'400 * kUs, 5 * kUs);
  EXPECT_NEAR(h.rate(), r + ai + hai, 1);
}

TEST(RttccZtr, FirstCongestionHalvesThenBoundedOncePerRtt) {
  Harness h("rttcc", no_flow_scaling());
  const double gain = Options{}.rttcc.decrease_gain;
  uint64_t t = 0;
  h.flow->on_bytes_sent(t, 0);
  h.rtt(t += 10 * kUs, 30 * kUs);  // first congestion: x0.5
  EXPECT_NEAR(h.rate(), kLine * 0.5, 1);
  double r = h.rate();
  h.rtt(t += 5 * kUs, 30 * kUs);  // within one RTT of the last decrease: unchanged
  EXPECT_DOUBLE_EQ(h.rate(), r);
  h.rtt(t += 40 * kUs, 14 * kUs);  // RTT fell below 0.98 x 30 us: draining, hold
  EXPECT_DOUBLE_EQ(h.rate(), r);
  h.rtt(t += 40 * kUs, 14 * kUs);  // not falling: proportional, over the 40 us since the
  EXPECT_NEAR(h.rate(), r * (1 - gain / 40), 1);  // previous sample: 1 - gain (14 - 13) / 40
  r = h.rate();
  h.rtt(t += 100 * kUs, 60 * kUs);  // 1 - gain 47/60 = 0.80 -> bounded at 0.97
  EXPECT_NEAR(h.rate(), r * 0.97, 1);
  r = h.rate();
  h.rtt(t += 300 * kUs, 300 * kUs);  // past max delay: proportional, not bounded by x0.97
  EXPECT_NEAR(h.rate(), r * (1 - gain * 287.0 / 300), 1);
  r = h.rate();
  h.rtt(t += 100'000 * kUs, 100'000 * kUs);  // a huge queue (100 ms): about x(1 - gain)
  EXPECT_NEAR(h.rate(), r * (1 - gain * (100'000.0 - 13) / 100'000), 1);
}

// Past the max delay the drivers' settings (use_software_timestamps: no cut
// from the sent rate) cut with the severe gain, 0.5: a flow that starts at
// line rate into a much slower bottleneck comes down by these cuts alone,
// about x0.5 per (millisecond) RTT, where the default 0.25 gives x0.75.
// Below the max delay both use decrease_gain.
TEST(RttccZtr, DriverSettingsCutHarderPastTheMaxDelay) {
  for (const bool driver : {false, true}) {
    Options o = no_flow_scaling();
    if (driver) cc::use_software_timestamps(&o.rttcc, 13'000);
    o.rttcc.min_rtt_target_factor = 0;  // the plain 13 us target either way
    Harness h("rttcc", o);
    uint64_t t = 0;
    h.rtt(t += 10 * kUs, 30 * kUs);  // first congestion
    double r = h.rate();
    h.rtt(t += 100 * kUs, 100 * kUs);  // rising, below the max delay: the x0.97 bound for both
    EXPECT_NEAR(h.rate(), r * Options{}.rttcc.min_change, 1) << driver;
    r = h.rate();
    h.rtt(t += 5'000 * kUs, 5'000 * kUs);  // 5 ms of queue, 5 ms since the previous sample
    const double gain = driver ? 0.5 : Options{}.rttcc.decrease_gain;
    EXPECT_NEAR(h.rate(), r * (1 - gain * (5'000.0 - 13) / 5'000), 1) << driver;
  }
}

// A congested sample whose RTT fell since the previous one holds the rate
// (the queue is draining), unless a NACK came with it; the hold is off with
// hold_ratio 0.
TEST(RttccZtr, FallingRttHoldsTheRateUnlessANackCame) {
  for (const double hold : {0.98, 0.0}) {
    Options o = no_flow_scaling();
    o.rttcc.hold_ratio = hold;
    Harness h("rttcc", o);
    uint64_t t = 0;
    h.rtt(t += 10 * kUs, 200 * kUs);  // first congestion: x0.5
    double r = h.rate();
    h.rtt(t += 500 * kUs, 150 * kUs);  // falling (150 < 0.98 x 200)
    if (hold > 0)
      EXPECT_DOUBLE_EQ(h.rate(), r) << "hold";
    else
      EXPECT_LT(h.rate(), r) << "no hold";
    r = h.rate();
    h.rtt(t += 500 * kUs, 148 * kUs);  // within 2 %: not draining, a cut
    EXPECT_LT(h.rate(), r) << hold;
    r = h.rate();
    h.flow->on_nack(t += 10 * kUs);
    h.rtt(t += 500 * kUs, 100 * kUs);  // falling, but a NACK: a cut
    EXPECT_LT(h.rate(), r) << hold;
  }
}

// A flow that samples once per 10 ms (a packet per 10 ms at 16 k flows) may
// grow, at its k-th calm sample in a row, by k x time_increase_fraction_per_ms
// of line rate per ms since its previous sample when that is more than
// max_change allows: the same absolute step for a slow and a slower flow
// (additive, so shares stay fair), small near the share and faster once the
// queue keeps reading empty. A congested sample starts the run again.
TEST(RttccZtr, RareSamplersClimbByTheSameAmountPerUnitTime) {
  auto flow_at = [](double fraction) {
    Options o = no_flow_scaling();
    o.rttcc.start_rate_fraction = fraction;
    return o;
  };
  Harness a("rttcc", flow_at(1e-4)), b("rttcc", flow_at(1e-5));  // 10 and 1 Mbit/s
  const double step = Options{}.rttcc.time_increase_fraction_per_ms * kLine * 10;  // 10 ms: 0.6 Mbit/s
  uint64_t t = 0;
  for (int k = 1; k <= 5; ++k) {
    const double ra = a.rate(), rb = b.rate();
    a.rtt(t += 10'000 * kUs, 5 * kUs);
    b.rtt(t, 5 * kUs);
    EXPECT_NEAR(a.rate() - ra, k * step, 1) << k;
    EXPECT_NEAR(b.rate() - rb, k * step, 1) << k;
  }
  a.rtt(t += 10'000 * kUs, 100 * kUs);  // congested (the first time: a cut)
  const double ra = a.rate();
  a.rtt(t += 10'000 * kUs, 5 * kUs);  // calm again: the run starts at 1
  EXPECT_NEAR(a.rate() - ra, step, 1);
  // Sampling every 10 us, the same flow is bounded by max_change alone.
  Harness c("rttcc", flow_at(1e-4));
  const double rc = c.rate();
  c.rtt(10 * kUs, 5 * kUs);
  EXPECT_NEAR(c.rate(), rc * Options{}.rttcc.max_change, 1);
}

// A cut is the excess delay over the time it has to act: max(RTT, time
// since the previous sample). Every flow on a queue samples within its own
// interval, so a flow that samples once per 5 ms (a packet per 5 ms at 16 k
// flows) spreads its cut over those 5 ms; cutting by the excess over the
// RTT at each of its samples took the aggregate far below the line.
TEST(RttccZtr, ARareSamplerSpreadsItsCutOverItsSampleInterval) {
  const double gain = Options{}.rttcc.decrease_gain;
  for (const uint64_t interval : {200 * kUs, 5'000 * kUs}) {
    Options o = no_flow_scaling();
    o.rttcc.start_rate_fraction = 1e-4;
    Harness h("rttcc", o);
    uint64_t t = 0;
    h.rtt(t += interval, 100 * kUs);  // first congestion
    const double r = h.rate();
    h.rtt(t += interval, 200 * kUs);  // rising, below the max delay
    if (interval == 200 * kUs)  // 1 - gain 187/200 = 0.77: bounded at x0.97
      EXPECT_NEAR(h.rate(), r * Options{}.rttcc.min_change, 1e-3);
    else  // 1 - gain 187/5000
      EXPECT_NEAR(h.rate(), r * (1 - gain * 187.0 / 5000), 1e-3);
  }
}

// A flow whose samples are >= rare_sample_rtts (4) RTTs apart and whose RTT
// falls fast enough to reach the target by its next sample grows now
// (rtt - (previous - rtt) <= target); one that samples every RTT holds, and
// a NACK still cuts.
TEST(RttccZtr, ARareSamplerGrowsWhenTheQueueWillHaveDrainedByItsNextSample) {
  auto run = [](uint64_t interval, bool nack) {
    Options o = no_flow_scaling();
    o.rttcc.start_rate_fraction = 1e-4;
    Harness h("rttcc", o);
    uint64_t t = 0;
    h.rtt(t += interval, 300 * kUs);  // first congestion
    double r = h.rate();
    h.rtt(t += interval, 160 * kUs);  // falling, but 160 - 140 = 20 us > 13 us: a hold
    EXPECT_DOUBLE_EQ(h.rate(), r) << interval;
    if (nack) h.flow->on_nack(t + 1);
    h.rtt(t += interval, 80 * kUs);  // 80 - 80 = 0 <= 13 us: drained by the next sample
    return h.rate() / r;
  };
  EXPECT_GT(run(5'000 * kUs, false), 1.0);         // rare: grows
  EXPECT_DOUBLE_EQ(run(100 * kUs, false), 1.0);    // every RTT or so: holds
  EXPECT_LT(run(5'000 * kUs, true), 1.0);          // a NACK: cuts
}

// Flow scaling: the same RTT is congestion for a flow near line rate and
// not for one far below it (its target is higher), so slow flows grow
// while fast ones cut, whatever their sampling rates.
TEST(RttccZtr, FlowScalingRaisesTheTargetOfSlowFlows) {
  Options slow_o = rate_rules(), fast_o = rate_rules();
  // a = 50 us / (1/sqrt(1e-4) - 1) = 0.505 us; extra target a (1/sqrt(f) - 1):
  slow_o.rttcc.start_rate_fraction = 0.001;  // 100 Mbit/s: + 15.5 us, target 28.5 us
  fast_o.rttcc.start_rate_fraction = 0.9;    // 90 Gbit/s: + 0.03 us, target 13.03 us
  Harness slow("rttcc", slow_o), fast("rttcc", fast_o);
  // The first sample of each: 25 us, above the plain 13 us target.
  slow.rtt(10 * kUs, 25 * kUs);
  fast.rtt(10 * kUs, 25 * kUs);
  EXPECT_GT(slow.rate(), 0.001 * kLine);  // within its scaled target: it increased
  EXPECT_LT(fast.rate(), 0.9 * kLine);    // congested: it cut (its first congestion: x0.5)
  // Far above any scaled target both cut.
  const double s0 = slow.rate();
  slow.rtt(500 * kUs, 400 * kUs);
  EXPECT_LT(slow.rate(), s0);
}

// The target counts the switches a probe crossed: 13 us for the first,
// hop_target_ns (3 us) for each one more. A 17 us sample is congestion for a
// flow inside one switch and calm for one across three (a leaf-spine
// fabric's leaf, spine and leaf); a sample that does not know its hops counts
// as the latest one that did. The template's base RTT is one fixed number.
TEST(RttccZtr, TheTargetGrowsWithTheSwitchHopsAProbeCrossed) {
  Options o = rate_rules();
  o.rttcc.start_rate_fraction = 0.9;  // flow scaling adds 0.03 us
  ASSERT_EQ(o.rttcc.hop_target_ns, 3'000u);
  Harness one("rttcc", o), three("rttcc", o), unknown("rttcc", o);
  one.flow->on_rtt_sample({10 * kUs, 17 * kUs, -1, 0, 1});
  three.flow->on_rtt_sample({10 * kUs, 17 * kUs, -1, 0, 3});
  unknown.rtt(10 * kUs, 17 * kUs);
  EXPECT_LT(one.rate(), 0.9 * kLine);    // above 13 us: its first congestion
  EXPECT_GT(three.rate(), 0.9 * kLine);  // within 19 us: it grew
  EXPECT_EQ(unknown.rate(), one.rate());
  // Later samples without hops keep the three: 18 us is still calm, 20 us is not.
  double r = three.rate();
  three.rtt(20 * kUs, 18 * kUs);
  EXPECT_GT(three.rate(), r);
  r = three.rate();
  three.rtt(40 * kUs, 20 * kUs);
  EXPECT_LT(three.rate(), r);
  // The template reads 17 us as above its 13 us base, whatever the hops.
  Harness tmpl("rttcc-template");
  tmpl.flow->on_rtt_sample({10 * kUs, 17 * kUs, -1, 0, 3});
  EXPECT_NEAR(tmpl.rate(), 0.9 * kLine, 1);
}

// A controller that takes over from another past its slow start (the
// simulator's controllers per path): no slow-start window, its start rate
// at once, and its first congestion cut as any later one (within
// min_change), not halved.
TEST(RttccZtr, OneStartedPastCongestionHasNoSlowStartAndNoFirstHalving) {
  Options o;
  o.rttcc.linear_gain = 0;
  o.rttcc.start_rate_fraction = 0.2;
  Harness fresh("rttcc", o);
  o.rttcc.start_past_congestion = true;
  Harness taken("rttcc", o);
  EXPECT_GT(fresh.flow->decision().window_bytes, 0u);  // slow start: one packet
  EXPECT_EQ(fresh.flow->decision().window_bytes, 4096u);
  EXPECT_NEAR(taken.rate(), 0.2 * kLine, 1);
  taken.rtt(100 * kUs, 20 * kUs);  // congested (an RTT after its start: a cut may come)
  EXPECT_GE(taken.rate(), 0.2 * kLine * o.rttcc.min_change - 1);
  EXPECT_LT(taken.rate(), 0.2 * kLine);
  Harness past_start("rttcc", rate_rules());  // for contrast: a fresh flow past slow start halves
  past_start.rtt(10 * kUs, 20 * kUs);
  EXPECT_NEAR(past_start.rate(), 0.5 * kLine, 1);
}

TEST(RttccZtr, DecreaseStartsFromWhatTheFlowActuallySent) {
  Harness h("rttcc", rate_rules());
  uint64_t t = 0;
  h.rtt(t += 10 * kUs, 5 * kUs);
  // The flow sent 1 Gbit/s worth over the next 100 us (NIC-limited), far
  // below its line-rate allowance: the first congestion cuts from that, by
  // first_cut_from_sent_factor (x0.8; halving counts the path's share twice).
  h.flow->on_bytes_sent(t + 50 * kUs, 12'500);
  h.rtt(t += 100 * kUs, 30 * kUs);
  EXPECT_NEAR(h.rate(), 1e9 * Options{}.rttcc.first_cut_from_sent_factor, 1e6);
}

TEST(RttccZtr, TimeoutAndNackCut) {
  Harness h("rttcc", no_flow_scaling());
  const double gain = Options{}.rttcc.decrease_gain;
  h.rtt(5 * kUs, 5 * kUs);
  h.flow->on_timeout(10 * kUs);  // an RTO is a NACK at the next sample, not a cut by itself
  EXPECT_DOUBLE_EQ(h.rate(), kLine);
  h.rtt(20 * kUs, 20 * kUs);  // congested (the first time): x0.5
  EXPECT_NEAR(h.rate(), kLine * 0.5, 1);
  double r = h.rate();
  h.flow->on_nack(30 * kUs);
  h.rtt(40 * kUs, 20 * kUs);  // NACK: proportional without the x0.97 bound
  EXPECT_NEAR(h.rate(), r * (1 - gain * 7 / 20), 1);
  r = h.rate();
  h.rtt(60 * kUs, 20 * kUs);  // no NACK: bounded at x0.97
  EXPECT_NEAR(h.rate(), r * 0.97, 1);
}

// A timeout the hosts made (the receiver had stopped reading its ring; the
// flow found it out from the ACK) is forgotten before the next sample; a
// NACK beside it is not.
TEST(RttccZtr, ASpuriousTimeoutIsForgottenANackBesideItIsNot) {
  Harness h("rttcc", no_flow_scaling());
  h.rtt(5 * kUs, 5 * kUs);
  h.flow->on_timeout(10 * kUs);
  h.flow->on_spurious_timeout(12 * kUs);
  h.rtt(20 * kUs, 5 * kUs);  // calm, and no NACK left: no cut
  EXPECT_DOUBLE_EQ(h.rate(), kLine);
  h.flow->on_nack(30 * kUs);
  h.flow->on_timeout(31 * kUs);
  h.flow->on_spurious_timeout(32 * kUs);
  h.rtt(40 * kUs, 5 * kUs);  // the NACK stands: the first congestion, x0.5
  EXPECT_NEAR(h.rate(), kLine * 0.5, 1);
}

// A late sample that the hosts' gaps in reading their rings may explain is
// skipped, pending signals included; one late beyond them counts.
TEST(RttccZtr, ASampleTheHostsGapsExplainIsSkipped) {
  for (const char* name : {"rttcc", "rttcc-template"}) {
    SCOPED_TRACE(name);
    Harness h(name, no_flow_scaling());
    h.rtt(5 * kUs, 5 * kUs);
    const double r = h.rate();
    h.flow->on_timeout(10 * kUs);
    h.flow->on_rtt_sample({20 * kUs, 300 * kUs, -1, 295 * kUs});  // 5 us without the gaps
    EXPECT_DOUBLE_EQ(h.rate(), r);
    h.flow->on_rtt_sample({30 * kUs, 300 * kUs, -1, 100 * kUs});  // 200 us without them: late
    EXPECT_LT(h.rate(), 0.81 * r);  // cut (ztr: x0.5; template: NACK past the max delay x0.5)
  }
}

// Past the gaps, a late sample cuts for the RTT less the gaps: 10 ms of
// RTT, most of it a preempted host, cut as the queue the gaps leave does,
// not as 10 ms would (in an incast under CPU contention, whole-RTT cuts took
// RTTCC to its floor: 40-80 s against 0.5 s uncontrolled). The queue left:
// 400 us for ztr (rising from 300), 120 us for the template (below its
// 150 us max delay, where 10 ms is past it).
TEST(RttccZtr, ALateSampleCutsForWhatTheGapsLeave) {
  for (const char* name : {"rttcc", "rttcc-template"}) {
    SCOPED_TRACE(name);
    const uint64_t queue = std::string(name) == "rttcc" ? 400 * kUs : 120 * kUs;
    Harness gapped(name, no_flow_scaling()), plain(name, no_flow_scaling()), whole(name, no_flow_scaling());
    for (Harness* h : {&gapped, &plain, &whole}) {
      h->rtt(5 * kUs, 5 * kUs);
      h->rtt(1'000 * kUs, 300 * kUs);  // the first congestion (ztr halves)
    }
    const double before = plain.rate();
    gapped.flow->on_rtt_sample({20'000 * kUs, 10'000 * kUs, -1, 10'000 * kUs - queue});
    plain.flow->on_rtt_sample({20'000 * kUs, queue, -1, 0});
    whole.flow->on_rtt_sample({20'000 * kUs, 10'000 * kUs, -1, 0});
    EXPECT_LT(plain.rate(), before);
    EXPECT_DOUBLE_EQ(gapped.rate(), plain.rate());
    EXPECT_LT(whole.rate(), 0.95 * plain.rate());
  }
}

// Slow start: one packet in flight until the first sample, the window
// doubling per calm sample; at the first congested sample the rate becomes
// what the window delivered over max(RTT, time since the previous sample),
// x first_cut_from_sent_factor, and from then on a window of two targets'
// worth of the rate, at least a packet, bounds what is in flight.
TEST(RttccZtr, SlowStartDoublesThenStartsFromWhatItsWindowDelivered) {
  Options o;
  o.rttcc.fs_range_ns = 0;  // the plain 13 us target
  const double cut = o.rttcc.first_cut_from_sent_factor;
  Harness h("rttcc", o);
  EXPECT_EQ(h.flow->decision().window_bytes, 4096u);
  EXPECT_DOUBLE_EQ(h.rate(), kLine);
  h.rtt(10 * kUs, 10 * kUs);  // calm: 2 packets
  EXPECT_EQ(h.flow->decision().window_bytes, 8192u);
  h.rtt(20 * kUs, 10 * kUs);  // calm: 4 packets
  EXPECT_EQ(h.flow->decision().window_bytes, 16384u);
  h.rtt(30 * kUs, 26 * kUs);  // congested: 16 KiB per 26 us, x0.8
  const double r = 16384 * 8e9 / 26'000 * cut;
  EXPECT_NEAR(h.rate(), r, 1);
  EXPECT_EQ(h.flow->decision().window_bytes, static_cast<uint64_t>(2 * r / 8e9 * 13'000));
  // A packet that waited at its host (under PFC) delivered over the whole
  // interval since the previous sample, not over its RTT alone.
  Harness w("rttcc", o);
  w.rtt(5'000 * kUs, 2'000 * kUs);
  EXPECT_NEAR(w.rate(), 4096 * 8e9 / 5'000'000 * cut, 1);
  // Under a packet per target of rate, the window is one packet.
  EXPECT_EQ(w.flow->decision().window_bytes, 4096u);
}

// The drivers (use_software_timestamps: on/off traffic, no cut from the sent
// rate) end slow start on what the window delivered over the RTT alone: the
// flow may have had nothing to send for most of the interval. A first sample
// past the max delay there is the usual first cut (x0.5): this early it is
// as likely the hosts' scheduling as a queue.
TEST(RttccZtr, OnTheDriversSlowStartEndsOnTheRttAlone) {
  Options o;
  cc::use_software_timestamps(&o.rttcc, 13'000);
  o.rttcc.min_rtt_target_factor = 0;
  o.rttcc.fs_range_ns = 0;
  Harness h("rttcc", o);
  h.rtt(5'000 * kUs, 26 * kUs);  // 5 ms idle before the first send: one packet per 26 us, x0.8
  EXPECT_NEAR(h.rate(), 4096 * 8e9 / 26'000 * o.rttcc.first_cut_from_sent_factor, 1);
  Harness g("rttcc", o);
  g.rtt(5'000 * kUs, 2'000 * kUs);  // past the max delay (250 us)
  EXPECT_NEAR(g.rate(), kLine * o.rttcc.first_congestion_factor, 1);
}

TEST(RttccZtr, SlowStartEndsWithoutACutOnceItsWindowNoLongerLimits) {
  Options o;
  o.rttcc.fs_range_ns = 0;
  Harness h("rttcc", o);
  uint64_t t = 0;
  // 250 us (the max delay) at line rate is 3.1 MB: 10 doublings pass it.
  for (int i = 0; i < 10; ++i) {
    EXPECT_GT(h.flow->decision().window_bytes, 0u);
    EXPECT_LE(h.flow->decision().window_bytes, 4096u << i);
    h.rtt(t += 10 * kUs, 10 * kUs);
  }
  EXPECT_DOUBLE_EQ(h.rate(), kLine);
  EXPECT_EQ(h.flow->decision().window_bytes, static_cast<uint64_t>(2 * kLine / 8e9 * 13'000));
  h.rtt(t += 10 * kUs, 30 * kUs);  // its first congestion is the usual one: x0.5
  EXPECT_NEAR(h.rate(), 0.5 * kLine, 1);
}

}  // namespace
}  // namespace grex::cc
