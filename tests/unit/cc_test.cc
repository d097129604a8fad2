// SPDX-License-Identifier: Apache-2.0
// Congestion controllers fed deterministic traces: each rule's exact step,
// the bounds, the reaction to timeouts / NACKs / CNPs, and convergence in a
// closed loop against a fluid bottleneck (one flow, a queue that grows when
// the flow sends faster than the bottleneck and drains when it sends slower).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "congestion/cc.h"

namespace grex::cc {
namespace {

constexpr double kLine = 100e9;
constexpr uint64_t kUs = 1000;

struct Harness {
  Flow flow;
  explicit Harness(const char* name, Options o = {}, uint64_t now = 0) {
    const Algorithm* a = find(name);
    EXPECT_NE(a, nullptr) << name;
    if (a != nullptr) flow.reset(*a, o, PathInfo{kLine, 4096}, now);
  }
  double rate() const { return flow->decision().rate_bps; }
  void rtt(uint64_t now, uint64_t rtt_ns, double util = -1) { flow->on_rtt_sample({now, rtt_ns, util}); }
};

// ---------------------------------------------------------------- registry

TEST(CcRegistry, EveryAlgorithmIsFoundAndBuilds) {
  EXPECT_EQ(algorithm_names(), "rttcc, rttcc-template, dcqcn, dcqcn-mlx5, timely, swift, none");
  for (const Algorithm& a : algorithms()) {
    Harness h(a.name);
    EXPECT_TRUE(h.flow.active());
    EXPECT_STREQ(h.flow.algorithm().name, a.name);
    EXPECT_GT(h.rate(), 0);
    EXPECT_LE(h.rate(), kLine);
  }
  EXPECT_EQ(find("cubic"), nullptr);
  EXPECT_TRUE(find("rttcc")->wants_rtt_probes);
  EXPECT_FALSE(find("dcqcn")->wants_rtt_probes);
  EXPECT_TRUE(find("dcqcn")->wants_cnp);
}

TEST(CcRegistry, ResetReplacesTheController) {
  Options o;
  o.rttcc.start_rate_fraction = 0.25;
  Harness h("rttcc", o);
  EXPECT_DOUBLE_EQ(h.rate(), 0.25 * kLine);
  h.flow.reset(*find("none"), o, PathInfo{kLine, 4096}, 0);
  EXPECT_DOUBLE_EQ(h.rate(), kLine);
}

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

// ---------------------------------------------------------------- RTTCC ztr

// The rate rules below are tested on flows past slow start (tested on its
// own further down): start_window_packets 0 starts a flow at its start rate.
Options rate_rules() {
  Options o;
  o.rttcc.start_window_packets = 0;
  return o;
}

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

Options no_flow_scaling() {
  Options o = rate_rules();
  o.rttcc.fs_range_ns = 0;  // the exact steps against the plain 13 us target
  return o;
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

TEST(RttccTemplate, HasNoWindow) {
  Harness h("rttcc-template");
  uint64_t t = 0;
  for (uint64_t rtt : {5, 30, 200, 5}) {
    EXPECT_EQ(h.flow->decision().window_bytes, 0u);
    h.rtt(t += 10 * kUs, rtt * kUs);
  }
  EXPECT_EQ(h.flow->decision().window_bytes, 0u);
}

// ---------------------------------------------------------------- DCQCN

TEST(Dcqcn, CutsOnCnpRecoversByTimerAndByteCounter) {
  Harness h("dcqcn");
  EXPECT_DOUBLE_EQ(h.rate(), kLine);
  h.flow->on_cnp(10 * kUs);  // alpha starts at 1: x(1 - alpha/2) = x0.5
  const double cut = h.rate();
  EXPECT_NEAR(cut, kLine * 0.5, 1);
  h.flow->on_cnp(12 * kUs);  // within the 4 us rate-reduce period: ignored
  EXPECT_DOUBLE_EQ(h.rate(), cut);
  // Fast recovery (F = 5): each byte-counter event (10 MB) halves the gap to
  // the target, which the cut set to the rate before it.
  h.flow->on_bytes_sent(13 * kUs, 10'000'000);
  EXPECT_NEAR(h.rate(), (kLine + cut) / 2, 1);
  // Timer events (every 55 us) recover with no traffic at all.
  h.flow->on_cnp(20 * kUs);
  const double r = h.rate();
  h.flow->on_rtt_sample({20 * kUs + 55 * kUs + 1, 0, -1});
  EXPECT_NEAR(h.rate(), 1.5 * r, 1);  // halfway back to the target (2 r, the rate before the cut)
  EXPECT_GT(h.rate(), r);
}

TEST(Dcqcn, AlphaDecaysWithoutCnps) {
  Harness h("dcqcn");
  h.flow->on_cnp(10 * kUs);  // alpha 1: x0.5, then alpha = 1 (keep 1 + 1 - keep)
  // 20 alpha periods (55 us) without CNPs: alpha = (255/256)^20 = 0.925; the
  // next cut is x(1 - 0.4624).
  const uint64_t t = 10 * kUs + 20 * 55 * kUs;
  h.flow->on_rtt_sample({t, 0, -1});
  const double r = h.rate();
  h.flow->on_cnp(t + 1);
  EXPECT_NEAR(h.rate() / r, 1 - std::pow(255.0 / 256, 20) / 2, 1e-6);
}

TEST(Dcqcn, Mlx5SetHasItsOwnCnpSpacingAndSteps) {
  DcqcnParams p;
  apply_dcqcn_set(&p, DcqcnSet::kMlx5);
  EXPECT_EQ(p.cnp_interval_ns, 4'000u);
  EXPECT_EQ(p.byte_counter_bytes, 32'767u);
  EXPECT_EQ(p.fast_recovery_steps, 1u);
  Harness h("dcqcn-mlx5");
  h.flow->on_cnp(10 * kUs);
  const double cut = h.rate();
  EXPECT_NEAR(cut, kLine * (1 - 1023.0 / 1024 / 2), 1);  // initial_alpha_value 1023 at the first CNP
  // F = 1: the first byte-counter event is already additive increase.
  h.flow->on_bytes_sent(11 * kUs, 32'767);
  EXPECT_GT(h.rate(), cut);
}

// ---------------------------------------------------------------- TIMELY

TEST(Timely, RegionsAndGradient) {
  Options o;
  o.timely.start_rate_fraction = 0.5;
  Harness h("timely", o);
  const double d = o.timely.ai_rate_bps;
  double r = h.rate();
  h.rtt(1 * kUs, 30 * kUs);  // first sample: only remembered
  EXPECT_DOUBLE_EQ(h.rate(), r);
  h.rtt(2 * kUs, 30 * kUs);  // below T_low: + delta
  EXPECT_NEAR(h.rate(), r + d, 1);
  r = h.rate();
  h.rtt(3 * kUs, 1000 * kUs);  // above T_high: x (1 - 0.8 (1 - 500/1000)) = x0.6
  EXPECT_NEAR(h.rate(), r * 0.6, 1);
  // Rising RTT inside [T_low, T_high]: a positive gradient cuts.
  Harness g("timely", o);
  g.rtt(1 * kUs, 100 * kUs);
  r = g.rate();
  g.rtt(2 * kUs, 120 * kUs);  // rtt_diff = 0.46 * 20 us; gradient = 9.2 / 20 = 0.46
  EXPECT_NEAR(g.rate(), r * (1 - 0.8 * 0.46), 1e3);
  // Five falling samples in a row: the fifth adds 5 delta (HAI).
  Harness f("timely", o);
  f.rtt(1 * kUs, 400 * kUs);
  for (int i = 1; i <= 4; ++i) f.rtt(static_cast<uint64_t>(i + 1) * kUs, static_cast<uint64_t>(400 - 10 * i) * kUs);
  r = f.rate();
  f.rtt(6 * kUs, 340 * kUs);
  EXPECT_NEAR(f.rate(), r + 5 * d, 1);
}

// ---------------------------------------------------------------- Swift

TEST(Swift, WindowFollowsTheDelayTarget) {
  Options o;
  o.swift.start_cwnd_packets = 10;
  Harness h("swift", o);
  EXPECT_EQ(h.flow->decision().window_bytes, 10u * 4096);
  h.rtt(20 * kUs, 10 * kUs);  // below the target: + ai per RTT (at most one per sample)
  EXPECT_NEAR(static_cast<double>(h.flow->decision().window_bytes), 11.0 * 4096, 4096);
  h.rtt(40 * kUs, 400 * kUs);  // far above: at most max_mdf (x0.5)
  const uint64_t w = h.flow->decision().window_bytes;
  EXPECT_LE(w, 6u * 4096);
  EXPECT_GE(w, 5u * 4096);
  h.rtt(41 * kUs, 400 * kUs);  // again within one RTT: no second cut
  EXPECT_EQ(h.flow->decision().window_bytes, w);
}

TEST(Swift, BelowOnePacketItPaces) {
  Options o;
  o.swift.start_cwnd_packets = 0.5;
  Harness h("swift", o);
  Decision d = h.flow->decision();
  EXPECT_EQ(d.window_bytes, 4096u);  // one packet in flight at most
  // rate = cwnd * MTU / srtt (base RTT 13 us before any sample)
  EXPECT_NEAR(d.rate_bps, 0.5 * 4096 * 8 / 13e-6, 1e6);
  h.flow->on_timeout(10 * kUs);
  EXPECT_NEAR(h.flow->decision().rate_bps, 0.25 * 4096 * 8 / 13e-6, 1e6);
}

// ---------------------------------------------------------------- closed loop

// One flow against a fluid bottleneck of capacity C behind a base RTT; one
// RTT sample per RTT (as one probe outstanding gives), CNPs when the queue
// exceeds an ECN threshold (at most one per 50 us, as the CnpPacer).
struct Loop {
  double capacity_bps;
  double queue_bytes = 0;
  double max_queue_bytes = 0;
  double sum_rate = 0, sum_time = 0;
  uint64_t opts_cnp_interval = CnpPacer::kDefaultIntervalNs;
  void run(Flow& f, uint64_t base_rtt_ns, uint64_t duration_ns, bool ecn) {
    CnpPacer np(f.algorithm().wants_cnp ? opts_cnp_interval : CnpPacer::kDefaultIntervalNs);
    uint64_t t = 0;
    while (t < duration_ns) {
      const double rtt_ns = static_cast<double>(base_rtt_ns) + queue_bytes * 8 / capacity_bps * 1e9;
      const double dt_ns = std::min(rtt_ns, 10'000.0);  // samples at least every 10 us
      Decision d = f->decision();
      double rate = d.rate_bps;
      if (d.window_bytes > 0) rate = std::min(rate, static_cast<double>(d.window_bytes) * 8 / (rtt_ns * 1e-9));
      queue_bytes = std::max(0.0, queue_bytes + (rate - capacity_bps) / 8 * dt_ns * 1e-9);
      t += static_cast<uint64_t>(dt_ns);
      f->on_bytes_sent(t, static_cast<uint64_t>(rate / 8 * dt_ns * 1e-9));
      if (ecn && queue_bytes > 100e3 && np.on_marked(t)) f->on_cnp(t);
      f->on_rtt_sample({t, static_cast<uint64_t>(rtt_ns), rate / kLine});
      if (t > duration_ns / 2) {  // the second half: steady state
        sum_rate += std::min(rate, capacity_bps) * dt_ns;
        sum_time += dt_ns;
        max_queue_bytes = std::max(max_queue_bytes, queue_bytes);
      }
    }
  }
  double utilisation() const { return sum_rate / sum_time / capacity_bps; }
};

class Converges : public ::testing::TestWithParam<const char*> {};

TEST_P(Converges, OneFlowFillsABottleneckWithABoundedQueue) {
  const std::string name = GetParam();
  for (double share : {0.4, 0.9}) {
    Harness h(name.c_str());
    Loop l{share * kLine};
    if (name == "dcqcn-mlx5") l.opts_cnp_interval = 4 * kUs;
    l.run(h.flow, 8 * kUs, 50'000 * kUs, h.flow.algorithm().wants_cnp && name != "rttcc-template");
    EXPECT_GT(l.utilisation(), name == "rttcc-template" ? 0.8 : 0.85) << name << " at " << share;
    // Steady-state queue in delay: bounded by each algorithm's own scale.
    const double max_delay_us = l.max_queue_bytes * 8 / l.capacity_bps * 1e6;
    const double bound_us = name == "timely" ? 600 : name == "rttcc-template" ? 160 : 260;
    EXPECT_LT(max_delay_us, bound_us) << name << " at " << share;
  }
}

INSTANTIATE_TEST_SUITE_P(Cc, Converges,
                         ::testing::Values("rttcc", "rttcc-template", "dcqcn", "dcqcn-mlx5", "timely", "swift"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// ---------------------------------------------------------------- probes and CNPs

TEST(ProbeScheduler, OneOutstandingNextAfterReplyResendAfterTimeout) {
  ProbeScheduler p;
  EXPECT_TRUE(p.on_send(0));  // the first send carries a probe
  const uint32_t first = p.seq();
  EXPECT_FALSE(p.on_send(1 * kUs));  // one outstanding
  EXPECT_TRUE(p.on_reply(first));
  EXPECT_FALSE(p.on_reply(first));  // a duplicate reply gives no second sample
  EXPECT_TRUE(p.on_send(20 * kUs));  // the first send after a reply
  const uint32_t lost = p.seq();
  // No reply: past the 300 us timeout the probe is sent again, but only once
  // 2 sends went out without one.
  EXPECT_FALSE(p.on_send(400 * kUs));  // 380 us later, yet the first send since
  EXPECT_TRUE(p.on_send(401 * kUs));   // the second
  EXPECT_EQ(p.probes_lost(), 1u);
  EXPECT_EQ(p.timeout_ns(), 600 * kUs);  // doubled
  // Lost again: the next resend waits for the doubled timeout.
  EXPECT_FALSE(p.on_send(401 * kUs + 500 * kUs));
  EXPECT_FALSE(p.on_send(401 * kUs + 550 * kUs));  // two sends, but within 600 us
  EXPECT_TRUE(p.on_send(401 * kUs + 601 * kUs));
  EXPECT_EQ(p.timeout_ns(), 1200 * kUs);
  const uint32_t newest = p.seq();
  // The first lost probe's reply arrives late: its sample counts (timed from
  // its own send), the backoff resets, the newest probe stays outstanding.
  EXPECT_TRUE(p.on_reply(lost));
  EXPECT_TRUE(p.outstanding());
  EXPECT_EQ(p.timeout_ns(), 300 * kUs);
  EXPECT_FALSE(p.on_reply(lost));        // a duplicate does not count
  EXPECT_FALSE(p.on_reply(newest + 1));  // nor a seq never sent
  EXPECT_TRUE(p.on_reply(newest));
  EXPECT_FALSE(p.outstanding());
  EXPECT_FALSE(p.on_reply(lost + 1));  // older than the newest reply taken
  EXPECT_EQ(p.probes_sent(), 4u);
}

TEST(CnpPacer, AtMostOnePerInterval) {
  CnpPacer np;
  EXPECT_TRUE(np.on_marked(0));
  EXPECT_FALSE(np.on_marked(49 * kUs));
  EXPECT_TRUE(np.on_marked(50 * kUs));
  EXPECT_FALSE(np.on_marked(60 * kUs));
}

}  // namespace
}  // namespace grex::cc
