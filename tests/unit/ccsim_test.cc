// SPDX-License-Identifier: Apache-2.0
// The incast simulator (congestion/sim) on small scenarios whose answers are
// known from first principles; each check fails if the model breaks.
#include <gtest/gtest.h>

#include <string>

#include "congestion/sim/sim.h"

namespace grex::ccsim {
namespace {

constexpr double kWireBytes = 4096 + 64;  // default MTU plus header

Config scenario(const char* cc, uint32_t flows, double duration_ms) {
  Config c;
  c.cc = cc;
  c.flows = flows;
  c.duration_ms = duration_ms;
  c.sample_us = 0;  // no time series: not checked here
  return c;
}

Result simulate(const Config& c) {
  Result r;
  std::string error;
  EXPECT_TRUE(run(c, &r, &error)) << error;
  return r;
}

// One flow at line rate through a switch port of the same rate: the port
// never holds more than the packet it forwards and the one arriving behind it.
TEST(Ccsim, OneUncontrolledFlowFillsTheLinkWithoutAQueue) {
  const Result r = simulate(scenario("none", 1, 5));
  EXPECT_GE(r.window.goodput, 0.99);
  EXPECT_LE(r.window.goodput, 1.001);
  EXPECT_LE(static_cast<double>(r.max_queue_bytes), 2 * kWireBytes);
  EXPECT_EQ(r.window.drops, 0u);
  EXPECT_EQ(r.window.pfc_pauses, 0u);
  EXPECT_EQ(r.buffer_overflows, 0u);
}

// An idle path: a probe's RTT is the propagation (10 us) plus its own and
// the data packet ahead of it serialisation: 10 + (4160 + 64) * 8 / 100 ns.
TEST(Ccsim, ProbeRttOfAnIdlePathIsPropagationPlusSerialisation) {
  const Result r = simulate(scenario("rttcc", 1, 5));
  EXPECT_NEAR(r.idle_probe_rtt_us, 10.0 + (4160 + 64) * 8 / 100e3, 1e-9);
  ASSERT_GT(r.window.rtt_us.count, 100u);
  EXPECT_NEAR(r.window.rtt_us.p50, r.idle_probe_rtt_us, 0.01 * r.idle_probe_rtt_us);
  EXPECT_GE(r.window.goodput, 0.99);
}

// RTTCC's target is a setting of the fabric: on a 40 us path the simulator
// sets 1.25 x the idle probe RTT for both sets; a fixed 13 us read every
// sample as congestion there and left the link at 0.01 of its rate.
TEST(Ccsim, RttccTargetFollowsALongerPath) {
  for (const char* cc : {"rttcc", "rttcc-template"}) {
    Config c = scenario(cc, 8, 50);
    c.base_rtt_us = 40;
    const Result r = simulate(c);
    EXPECT_NEAR(r.rttcc_target_us, 1.25 * r.idle_probe_rtt_us, 0.01) << cc;
    EXPECT_GE(r.window.goodput, 0.9) << cc;
    c.rttcc_target_us = 13;  // the fixed default: every sample congested
    EXPECT_LT(simulate(c).window.goodput, 0.2) << cc;
  }
  EXPECT_NEAR(simulate(scenario("rttcc", 2, 5)).rttcc_target_us, 13, 1e-9);  // the default path keeps 13 us
}

TEST(Ccsim, TwoRttccFlowsConvergeToEqualShares) {
  Config c = scenario("rttcc", 2, 40);
  c.hosts = 2;
  c.warmup_ms = 20;  // the last half
  const Result r = simulate(c);
  EXPECT_EQ(r.window.jain_flows, 2u);
  EXPECT_GE(r.window.jain, 0.99);
  EXPECT_GE(r.window.goodput, 0.95);
}

// The pacer follows a rate change at once, as the drivers' token bucket
// does: a flow at 1 Mbit/s whose gap after its first packet would be 33 ms
// is let grow 100-fold by its first RTT sample, 10 us later; what is left
// of the gap then runs at 100 Mbit/s, so the second packet leaves about
// 0.33 ms in and each later one sooner still. A pacer that kept the old
// gap would send one packet in these 2 ms.
TEST(Ccsim, ARateChangeAppliesToTheGapAlreadyRunning) {
  Config c = scenario("rttcc", 1, 2);
  c.cc_options.rttcc.start_window_packets = 0;  // no slow start: the rate alone paces
  c.cc_options.rttcc.start_rate_fraction = 1e-5;  // 1 Mbit/s
  c.cc_options.rttcc.max_change = 100;
  c.cc_options.rttcc.ai_fraction = 0.5;  // not the binding bound
  c.warmup_ms = 0;
  const Result r = simulate(c);
  EXPECT_GE(r.window.data_packets, 20u);
  EXPECT_GT(r.window.goodput, 0.1);
}

// 8 senders at line rate into one port: PFC must hold them 7/8 of the time,
// without a drop and without the queue passing the buffer.
TEST(Ccsim, LosslessIncastPausesInsteadOfDropping) {
  Config c = scenario("none", 8, 5);
  c.buffer_mb = 4;  // many pause cycles in a short run
  const Result r = simulate(c);
  EXPECT_EQ(r.whole.drops, 0u);
  EXPECT_EQ(r.buffer_overflows, 0u);
  EXPECT_LE(static_cast<double>(r.max_queue_bytes), c.buffer_mb * 1e6);
  EXPECT_GT(static_cast<double>(r.max_queue_bytes), static_cast<double>(r.pfc_xoff_bytes));
  EXPECT_GT(r.window.pfc_pauses, 10u);
  EXPECT_NEAR(r.window.pfc_pause_fraction, 7.0 / 8, 0.02);
  EXPECT_GE(r.window.goodput, 0.99);
  EXPECT_GE(r.window.jain, 0.99);
}

// The same with tail drop: 7 of 8 packets offered are dropped and resent,
// the port stays busy.
TEST(Ccsim, LossyIncastDropsAndStillFillsTheLink) {
  Config c = scenario("none", 8, 5);
  c.buffer_mb = 4;
  c.lossy = true;
  const Result r = simulate(c);
  EXPECT_GT(r.window.drops, 0u);
  EXPECT_EQ(r.window.pfc_pauses, 0u);
  EXPECT_LE(static_cast<double>(r.max_queue_bytes), c.buffer_mb * 1e6);
  EXPECT_NEAR(static_cast<double>(r.window.drops) / static_cast<double>(r.window.data_packets), 7.0 / 8, 0.02);
  EXPECT_GT(r.window.retransmits, 0u);
  EXPECT_GE(r.window.goodput, 0.95);
}

// With ECN, DCQCN holds the queue around the marking band; without ECN it
// gets no signal and the queue sits at the PFC threshold (so this can fail).
TEST(Ccsim, DcqcnWithEcnKeepsTheQueueNearTheMarkingBand) {
  Config c = scenario("dcqcn", 8, 20);
  c.ecn = true;
  const Result r = simulate(c);
  EXPECT_GT(r.window.cnps, 0u);
  EXPECT_LT(r.window.queue_kb.p99, c.kmax_kb + 100);
  EXPECT_EQ(r.buffer_overflows, 0u);

  c.ecn = false;
  const Result blind = simulate(c);
  EXPECT_EQ(blind.window.cnps, 0u);
  EXPECT_GT(blind.window.queue_kb.p99, 10 * (c.kmax_kb + 100));
}

TEST(Ccsim, RttccProbeOverheadIsSmall) {
  const Result r = simulate(scenario("rttcc", 64, 10));
  EXPECT_GT(r.window.probes, 0u);
  EXPECT_GT(r.window.rtt_us.count, 0u);
  EXPECT_LT(r.window.probe_overhead, 0.02);
}

// Four senders each send 64 KB at once: the port forwards 64 packets back
// to back after the first arrives (one serialisation and one hop), and the
// last reaches the receiver one hop later.
TEST(Ccsim, BurstCompletesInOneDrainOfThePort) {
  Config c = scenario("none", 4, 5);
  c.scenario = Scenario::kBurst;
  c.burst_kb = 16 * 4.096;  // 16 full packets per flow
  c.burst_period_us = 1000;
  const Result r = simulate(c);
  EXPECT_EQ(r.bursts_started, 5u);
  EXPECT_EQ(r.bursts_completed, 5u);
  const double expect_us = 0.3328 + 2.5 + 64 * 0.3328 + 2.5;
  EXPECT_NEAR(r.burst_completion_us.p50, expect_us, 0.01 * expect_us);
  EXPECT_NEAR(r.burst_completion_us.max, expect_us, 0.01 * expect_us);
}

// Join-leave bookkeeping: 4 joins 2 ms apart and one leave. Flows without
// control share a FIFO port equally once a newcomer's first packets got
// through the queue (a small buffer: under 1 MB, 80 us, ahead of them).
TEST(Ccsim, JoinLeaveReportsEveryChange) {
  Config c = scenario("none", 4, 30);
  c.scenario = Scenario::kJoinLeave;
  c.stagger_us = 2000;
  c.buffer_mb = 1;
  c.warmup_ms = 7;  // after the last join
  const Result r = simulate(c);
  ASSERT_EQ(r.convergence.size(), 5u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(r.convergence[i].join);
    EXPECT_DOUBLE_EQ(r.convergence[i].at_us, 2000.0 * i);
    EXPECT_EQ(r.convergence[i].active_flows, static_cast<uint32_t>(i + 1));
  }
  EXPECT_FALSE(r.convergence[4].join);
  EXPECT_DOUBLE_EQ(r.convergence[4].at_us, 20000.0);
  EXPECT_EQ(r.convergence[4].active_flows, 2u);
  for (const Convergence& x : r.convergence) {
    EXPECT_GE(x.time_us, 0) << "change at " << x.at_us << " us";
    EXPECT_LE(x.time_us, 80 + 2 * c.jain_window_us) << "change at " << x.at_us << " us";
  }
  EXPECT_EQ(r.window.jain_flows, 2u);  // the two that stay
}

TEST(Ccsim, SameSeedSameJsonOtherSeedOtherJson) {
  Config c = scenario("dcqcn", 8, 5);
  c.ecn = true;
  c.sample_us = 10;
  const std::string a = to_json(c, simulate(c), false);
  const std::string b = to_json(c, simulate(c), false);
  EXPECT_EQ(a, b);
  const Result r1 = simulate(c);
  const Result r2 = simulate(c);
  EXPECT_EQ(to_csv(r1), to_csv(r2));
  c.seed = 2;
  EXPECT_NE(to_json(c, simulate(c), false), a);
}

TEST(Ccsim, RejectsWhatCannotRun) {
  Result r;
  std::string error;
  Config c;
  c.cc = "no-such-algorithm";
  EXPECT_FALSE(run(c, &r, &error));
  EXPECT_NE(error.find("no-such-algorithm"), std::string::npos);
  c = Config{};
  c.flows = 1024;
  c.buffer_mb = 1;  // the PFC headroom of 64 hosts does not fit
  EXPECT_FALSE(run(c, &r, &error));
  c.lossy = true;  // without PFC it does
  EXPECT_EQ(check(c), "");
}

TEST(Ccsim, ParsesTheCommandLine) {
  const char* argv[] = {"grex-ccsim", "--cc", "dcqcn", "--flows=128", "--ecn", "--lossy", "--gbps", "400",
                        "--scenario", "join-leave", "--json", "out.json", "--seed", "7"};
  Cli cli;
  std::string error;
  ASSERT_TRUE(parse_args(static_cast<int>(std::size(argv)), argv, &cli, &error)) << error;
  EXPECT_EQ(cli.cfg.cc, "dcqcn");
  EXPECT_EQ(cli.cfg.flows, 128u);
  EXPECT_TRUE(cli.cfg.ecn);
  EXPECT_TRUE(cli.cfg.lossy);
  EXPECT_EQ(cli.cfg.gbps, 400);
  EXPECT_EQ(cli.cfg.scenario, Scenario::kJoinLeave);
  EXPECT_EQ(cli.json_path, "out.json");
  EXPECT_EQ(cli.cfg.seed, 7u);
  const char* bad[] = {"grex-ccsim", "--flows", "many"};
  EXPECT_FALSE(parse_args(3, bad, &cli, &error));
  const char* unknown[] = {"grex-ccsim", "--frobnicate"};
  EXPECT_FALSE(parse_args(2, unknown, &cli, &error));
}

}  // namespace
}  // namespace grex::ccsim
