// SPDX-License-Identifier: Apache-2.0
// Congestion controllers fed deterministic traces: the registry, DCQCN,
// TIMELY and Swift rule by rule (RTTCC's rules: cc_rttcc_test.cc), every
// controller's convergence in a closed loop against a fluid bottleneck (one
// flow, a queue that grows when the flow sends faster than the bottleneck
// and drains when it sends slower), the probe scheduler and the CNP pacer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cc_harness.h"
#include "congestion/cc.h"

namespace grex::cc {
namespace {

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

// Swift's fabric target is base + hops x per-hop (Algorithm 1's target
// scaling): with 5 us a hop, a 40 us RTT is above the 30 us target of one
// hop and below the 45 us of four.
TEST(Swift, TheTargetScalesWithTheHops) {
  Options o;
  o.swift.start_cwnd_packets = 10;
  o.swift.hop_target_ns = 5'000;
  Harness near("swift", o), far("swift", o);
  near.flow->on_rtt_sample({20 * kUs, 40 * kUs, -1, 0, 1});
  far.flow->on_rtt_sample({20 * kUs, 40 * kUs, -1, 0, 4});
  EXPECT_LT(near.flow->decision().window_bytes, 10u * 4096);
  EXPECT_GT(far.flow->decision().window_bytes, 10u * 4096);
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
