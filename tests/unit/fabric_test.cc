// SPDX-License-Identifier: Apache-2.0
// ccsim's leaf-spine fabric (issue 31) on cases whose answers follow from the
// topology alone: capacity with one path and with many, a failed spine,
// traffic that stays inside a leaf, a finite flow's completion time, and a
// run being a function of its configuration. Uncontrolled flows (cc none)
// where capacity is the question; a packet past a full buffer is trimmed and
// sent again, so every byte still arrives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include <string>

#include "congestion/multipath.h"
#include "congestion/sim/fabric.h"

namespace grex::ccsim {
namespace {

constexpr double kPayloadShare = 4096.0 / (4096 + 64);  // default MTU over MTU plus header

FabricResult simulate(const FabricConfig& c) {
  FabricResult r;
  std::string error;
  EXPECT_TRUE(run_fabric(c, &r, &error)) << error;
  return r;
}

// RTTCC on L leaves x S spines x H hosts, the other settings the defaults.
FabricConfig rttcc_fabric(uint32_t leaves, uint32_t spines, uint32_t hosts_per_leaf) {
  FabricConfig c;
  c.cc = "rttcc";
  c.leaves = leaves;
  c.spines = spines;
  c.hosts_per_leaf = hosts_per_leaf;
  return c;
}

// Two leaves, one host on each, a 400G host link over four 100G spines: a
// flow on one path gets one spine's 100G; sprayed over many entropies it gets
// all four (the hash spreads 256 entropies unevenly: 0.9 of the sum at least).
FabricConfig two_hosts_four_spines(uint32_t paths) {
  FabricConfig c;
  c.cc = "none";
  c.leaves = 2;
  c.spines = 4;
  c.hosts_per_leaf = 1;
  c.host_gbps = 400;
  c.spine_gbps = 100;
  c.pattern = Pattern::kRing;
  c.paths = paths;
  c.duration_ms = 3;
  return c;
}

TEST(Fabric, SprayingOverSEqualPathsGivesSTimesOnePath) {
  const FabricResult one = simulate(two_hosts_four_spines(1));
  const FabricResult many = simulate(two_hosts_four_spines(256));
  EXPECT_EQ(one.flows, 2u);
  EXPECT_NEAR(one.goodput_gbps, 2 * 100 * kPayloadShare, 2 * 100 * 0.02);
  EXPECT_GE(many.goodput_gbps, 0.9 * 2 * 400 * kPayloadShare);
  EXPECT_LE(many.goodput_gbps, 2 * 400 * kPayloadShare * 1.001);
  EXPECT_GE(many.goodput_gbps / one.goodput_gbps, 3.6);
  for (double u : many.spine_utilization) EXPECT_GE(u, 0.8);
  EXPECT_GT(one.trimmed, 0u);  // 400G into one 100G spine: the buffer overflows, and trimming recovers it
}

TEST(Fabric, AFailedSpineLosesOnlyItsShare) {
  FabricConfig c = two_hosts_four_spines(256);
  const FabricResult all = simulate(c);
  c.failed_spine = 1;
  c.fail_at_ms = 0;
  const FabricResult failed = simulate(c);
  EXPECT_NEAR(failed.goodput_gbps / all.goodput_gbps, 0.75, 0.06);
  EXPECT_EQ(failed.spine_utilization[1], 0.0);
  for (int s : {0, 2, 3}) EXPECT_GE(failed.spine_utilization[s], 0.9);
}

// A spine failing under finite flows: what was queued on it is trimmed and
// resent over the others, and every flow still completes, later than without.
TEST(Fabric, FlowsCompleteThroughASpineFailure) {
  FabricConfig c = rttcc_fabric(4, 4, 2);
  c.paths = 64;
  c.pattern = Pattern::kRing;
  c.flow_kb = 2000;
  c.duration_ms = 20;
  const FabricResult ok = simulate(c);
  c.failed_spine = 2;
  c.fail_at_ms = 0.05;
  const FabricResult failed = simulate(c);
  ASSERT_EQ(ok.flows_done, ok.flows);
  ASSERT_EQ(failed.flows_done, failed.flows);
  EXPECT_GT(failed.completion_ms, ok.completion_ms);
  EXPECT_GT(failed.trimmed, 0u);
  EXPECT_GE(failed.retransmits, failed.trimmed);
}

// Issue 31: a spine failing under long-lived traffic. Sprayed, the delivered
// rate is back to 0.9 of what it was (or of what three spines carry, if
// less) within a few milliseconds simulated (the goal is 1 ms): with
// RTTCC's target over hops no 50 us window falls below that bar (0 ms; 1.35
// ms with one target for every flow, RTTCC's climb back after cutting for
// the NACKs of the packets lost with the spine). On one path each, the flows
// rehashed onto the remaining spines collide, and the rate does not come back
// in the run.
TEST(Fabric, ASprayedFlowRecoversFromASpineFailure) {
  FabricConfig c = rttcc_fabric(4, 4, 4);
  c.paths = 64;
  c.pattern = Pattern::kRing;
  c.duration_ms = 6;
  c.warmup_ms = 0.5;
  c.failed_spine = 1;
  c.fail_at_ms = 2;
  const FabricResult sprayed = simulate(c);
  c.paths = 1;
  const FabricResult ecmp = simulate(c);
  for (const FabricResult* r : {&sprayed, &ecmp})
    std::printf("%s: before %.0f Gbit/s, lowest 50 us window after %.0f, level after %.0f, recovered in %.2f ms\n",
                r == &sprayed ? "sprayed" : "one path", r->before_fail_gbps, r->dip_gbps, r->after_fail_gbps,
                r->recovery_ms);
  EXPECT_GE(sprayed.recovery_ms, 0);
  EXPECT_LE(sprayed.recovery_ms, 3.0);
  EXPECT_EQ(ecmp.recovery_ms, -1);
  EXPECT_GT(sprayed.after_fail_gbps, 1.2 * ecmp.after_fail_gbps);
  // Without a failure there is nothing to recover from.
  c.failed_spine = -1;
  EXPECT_EQ(simulate(c).recovery_ms, -1);
}

TEST(Fabric, TrafficInsideALeafNeverTouchesASpine) {
  FabricConfig c;
  c.cc = "none";
  c.leaves = 1;
  c.spines = 2;
  c.hosts_per_leaf = 8;
  c.duration_ms = 2;
  const FabricResult r = simulate(c);
  EXPECT_NEAR(r.goodput_gbps, 8 * 100 * kPayloadShare, 8 * 100 * 0.005);
  for (double u : r.spine_utilization) EXPECT_EQ(u, 0.0);
  EXPECT_EQ(r.trimmed, 0u);
}

// ECMP hashes whole flows: in a permutation across 4 leaves some uplinks get
// two flows and some none. Spraying spreads every flow's packets.
TEST(Fabric, SprayingBeatsEcmpCollisionsUnderAPermutation) {
  FabricConfig c;
  c.cc = "none";
  c.leaves = 4;
  c.spines = 4;
  c.hosts_per_leaf = 4;
  c.duration_ms = 2;
  const FabricResult ecmp = simulate(c);
  c.paths = 256;
  const FabricResult sprayed = simulate(c);
  const double capacity = 16 * 100 * kPayloadShare;
  EXPECT_LT(ecmp.goodput_gbps, 0.85 * capacity);
  EXPECT_GE(sprayed.goodput_gbps, 0.95 * capacity);
  EXPECT_GT(sprayed.per_flow_min_gbps, ecmp.per_flow_min_gbps);
}

// RTTCC across leaves: the probes of a flow between leaves cross three
// switches, and its target grows by a hop target for each past the first
// (13 + 2 x 3 us). Sprayed alltoall then finishes in about the bytes' time
// at the receivers, over 1.5 x faster than on one path (where ECMP's
// collisions hold it back), with its p99 queue well within the target.
// With one target for every flow (hop target 0), the sprayed packets'
// transient queues at three hops read as congestion: it is slower than one
// path here (2.3 against 1.2 ms).
TEST(Fabric, RttccsTargetOverHopsLetsASprayedAlltoallBeatOnePath) {
  FabricConfig c = rttcc_fabric(4, 4, 4);
  c.pattern = Pattern::kAlltoall;
  c.flow_kb = 500;
  c.duration_ms = 50;
  auto run = [&](uint32_t paths, double hop_us) {
    c.paths = paths;
    c.rttcc_hop_target_us = hop_us;
    return simulate(c);
  };
  const FabricResult one = run(1, -1), sprayed = run(64, -1);
  ASSERT_EQ(one.flows_done, one.flows);
  ASSERT_EQ(sprayed.flows_done, sprayed.flows);
  EXPECT_DOUBLE_EQ(sprayed.rttcc_hop_target_us, 3);
  std::printf("one path %.3f ms, sprayed %.3f ms (p99 queue %.2f us)\n", one.completion_ms, sprayed.completion_ms,
              sprayed.queue_delay_us.p99);
  EXPECT_GE(one.completion_ms / sprayed.completion_ms, 1.5);
  EXPECT_LT(sprayed.queue_delay_us.p99, sprayed.rttcc_target_us);
  // 15 flows of 500 KB into each 100G host link: the bytes' time is 0.61 ms.
  EXPECT_LT(sprayed.completion_ms, 1.25 * 15 * 500e3 * 8 / 100e9 * 1e3 / kPayloadShare);
  const FabricResult flat = run(64, 0);
  std::printf("sprayed with one target for every flow: %.3f ms\n", flat.completion_ms);
  EXPECT_LT(one.completion_ms / flat.completion_ms, 1.2);
}

// One 1 MB flow each way between two leaves at 100G: serialisation of the
// bytes with their headers plus the idle path latency.
TEST(Fabric, AFiniteFlowCompletesInItsSerialisationTime) {
  FabricConfig c;
  c.cc = "none";
  c.leaves = 2;
  c.spines = 1;
  c.hosts_per_leaf = 1;
  c.pattern = Pattern::kRing;
  c.flow_kb = 1000;
  const FabricResult r = simulate(c);
  ASSERT_EQ(r.flows_done, 2u);
  const double serial_ms = 1e6 * 8 / kPayloadShare / 100e9 * 1e3;
  EXPECT_GT(r.completion_ms, serial_ms);
  EXPECT_LT(r.completion_ms, serial_ms + r.idle_rtt_us / 1e3);
  EXPECT_EQ(r.trimmed, 0u);
}

TEST(Fabric, ARunIsAFunctionOfItsConfiguration) {
  FabricConfig c;
  c.leaves = 3;
  c.spines = 2;
  c.hosts_per_leaf = 3;
  c.paths = 8;
  c.ecn = true;
  c.cc = "dcqcn";
  c.pattern = Pattern::kAlltoall;
  c.flow_kb = 200;
  const FabricResult a = simulate(c), b = simulate(c);
  EXPECT_EQ(to_json(c, a, false), to_json(c, b, false));
  EXPECT_EQ(a.flows, 9u * 8u);
  EXPECT_EQ(a.flows_done, a.flows);
  c.seed = 2;
  EXPECT_NE(to_json(c, simulate(c), false), to_json(c, a, false));
}

TEST(EntropyRecycler, ReusesCleanEntropiesForgetsCongestedOnesExploresWhenOut) {
  cc::EntropyRecycler r(7, /*cache=*/4, /*space=*/1000);
  const uint32_t a = r.next(), b = r.next();  // nothing cached: both fresh
  EXPECT_EQ(r.explored(), 2u);
  EXPECT_LT(a, 1000u);
  r.on_clean(a);
  r.on_congested(b);
  EXPECT_EQ(r.cached(), 1u);
  EXPECT_EQ(r.next(), a);  // the clean one again, the congested one never
  EXPECT_EQ(r.explored(), 2u);
  EXPECT_EQ(r.dropped(), 1u);
  for (uint32_t e = 0; e < 10; ++e) r.on_clean(e);
  EXPECT_EQ(r.cached(), 4u);  // bounded
  for (uint32_t e = 0; e < 4; ++e) EXPECT_EQ(r.next(), e);  // oldest first
  r.next();
  EXPECT_EQ(r.explored(), 3u);
  // A fresh draw avoids the last congested entropies (redrawn up to three
  // times): of 4, with 2 congested, it lands on 2 about (1/4)^4 of the time.
  cc::EntropyRecycler s(9, 1, 4);
  s.on_congested(2);
  int twos = 0;
  for (int i = 0; i < 4000; ++i) twos += s.next() == 2;
  EXPECT_GT(twos, 0);     // still re-probed now and then
  EXPECT_LT(twos, 60);    // about 16 of 4000, against 1000 without the memory
}

// One spine of four runs at a quarter of the rate. Oblivious spraying puts a
// quarter of every flow on it, so every flow is held to the slow spine's
// pace. REPS drops the entropies whose packets come back marked and reuses
// the clean ones, so the flows move to the healthy spines: most of the
// healthy links' sum (2 directions x (3 x 100 + 25) Gbit/s) gets through.
TEST(Fabric, RecycledEntropiesAvoidASlowSpine) {
  FabricConfig c;
  c.cc = "dcqcn";
  c.ecn = true;
  c.leaves = 2;
  c.spines = 4;
  c.hosts_per_leaf = 4;
  c.pattern = Pattern::kRing;
  c.slow_spine = 0;
  c.slow_factor = 0.25;
  c.duration_ms = 10;
  c.paths = 64;
  const FabricResult oblivious = simulate(c);
  c.spray = Spray::kReps;
  const FabricResult reps = simulate(c);
  const double healthy = 2 * (3 * 100 + 25) * kPayloadShare;
  EXPECT_LT(oblivious.goodput_gbps, 0.3 * healthy);
  EXPECT_GE(reps.goodput_gbps, 0.75 * healthy);
  EXPECT_GT(reps.explored, 0u);
  for (int s : {1, 2, 3}) EXPECT_GT(reps.spine_utilization[s], 2 * oblivious.spine_utilization[s]);
  // RTTCC, without ECN: a packet whose round trip passed the target marks its
  // entropy as one to drop, the delay-based controller's path signal.
  c.cc = "rttcc";
  c.ecn = false;
  const FabricResult rtt_reps = simulate(c);
  c.spray = Spray::kOblivious;
  const FabricResult rtt_oblivious = simulate(c);
  EXPECT_LT(rtt_oblivious.goodput_gbps, 0.35 * healthy);
  EXPECT_GE(rtt_reps.goodput_gbps, 0.7 * healthy);
  EXPECT_LT(rtt_reps.spine_utilization[0], 0.5);  // the slow spine is left mostly alone
}

// RTTCC with a controller per path, on the same slow spine: once the flow's
// controller meets congestion, each entropy's own controller takes over at a
// share of its rate. The paths through the slow spine are cut alone and the
// others carry the rest: the healthy links full and the slow spine at its
// pace, where the flow's one controller is held to the slow spine's pace on
// every path. Oblivious spraying still (no REPS), so it is the controllers
// alone that move the bytes.
TEST(Fabric, AControllerPerPathLeavesASlowSpineAtItsPaceAndFillsTheOthers) {
  FabricConfig c = rttcc_fabric(2, 4, 4);
  c.pattern = Pattern::kRing;
  c.slow_spine = 0;
  c.slow_factor = 0.25;
  c.duration_ms = 5;
  c.paths = 64;
  const FabricResult flow = simulate(c);
  c.path_cc = true;
  const FabricResult path = simulate(c);
  const double healthy = 2 * (3 * 100 + 25) * kPayloadShare;
  std::printf("one controller %.0f Gbit/s, one per path %.0f (healthy links' sum %.0f)\n", flow.goodput_gbps,
              path.goodput_gbps, healthy);
  EXPECT_LT(flow.goodput_gbps, 0.4 * healthy);
  EXPECT_GE(path.goodput_gbps, 0.9 * healthy);
  for (double u : path.spine_utilization) EXPECT_GE(u, 0.9);  // the slow spine busy too, at its pace
}

// The long-lived ring across 4 leaves: 64 entropies hash unevenly over the 4
// spines, and the flow's one controller cuts for the busiest spine it sprays
// over. Controllers per path fill the spines, with the p99 queue within the
// target across leaves. Traffic that never meets congestion never hands
// over: an alltoall that RTTCC keeps under its target runs as with one
// controller, to the same numbers.
TEST(Fabric, ControllersPerPathFillEverySpineUnderALongLivedRing) {
  FabricConfig c = rttcc_fabric(4, 4, 4);
  c.pattern = Pattern::kRing;
  c.duration_ms = 10;
  c.paths = 64;
  const FabricResult flow = simulate(c);
  c.path_cc = true;
  const FabricResult path = simulate(c);
  const double capacity = 16 * 100 * kPayloadShare;
  std::printf("one controller %.0f Gbit/s, one per path %.0f (p99 queue %.2f us) of %.0f\n", flow.goodput_gbps,
              path.goodput_gbps, path.queue_delay_us.p99, capacity);
  EXPECT_LT(flow.goodput_gbps, 0.85 * capacity);
  EXPECT_GE(path.goodput_gbps, 0.95 * capacity);
  EXPECT_LT(path.queue_delay_us.p99, path.rttcc_target_us + 2 * path.rttcc_hop_target_us);
  c.pattern = Pattern::kAlltoall;
  c.flow_kb = 500;
  c.duration_ms = 50;
  const FabricResult a2a_path = simulate(c);
  c.path_cc = false;
  const FabricResult a2a_flow = simulate(c);
  EXPECT_EQ(a2a_path.completion_ms, a2a_flow.completion_ms);
  EXPECT_EQ(a2a_path.probes, a2a_flow.probes);
}

// --csv's series: one point per interval up to the end, whose goodputs add
// up to what the run delivered, and a queue only where packets waited.
TEST(Fabric, TheSeriesAddsUpToWhatTheRunDelivered) {
  FabricConfig c = rttcc_fabric(2, 2, 2);
  c.pattern = Pattern::kRing;
  c.paths = 8;
  c.duration_ms = 1;
  c.warmup_ms = 0;
  c.sample_us = 50;
  const FabricResult r = simulate(c);
  ASSERT_EQ(r.series.size(), 20u);
  EXPECT_DOUBLE_EQ(r.series.back().t_us, 1000);
  double sum = 0, peak = 0;
  for (const FabricResult::Point& p : r.series) {
    sum += p.goodput_gbps;
    peak = std::max(peak, p.max_queue_kb);
  }
  EXPECT_NEAR(sum / 20, r.goodput_gbps, 0.01 * r.goodput_gbps);
  EXPECT_GT(peak, 0);
  EXPECT_LE(peak, c.buffer_kb);
  EXPECT_NE(series_csv(r).find("t_us,goodput_gbps,max_queue_kb\n50.000,"), std::string::npos);
  c.sample_us = 0;
  EXPECT_TRUE(simulate(c).series.empty());
}

// 15 senders into one host. Uncontrolled, they fill its port's buffer and
// lose what overflows. With receiver credits, after the unscheduled first
// windows the receiver's grants pace the arrivals at its link's rate, and the
// unscheduled bytes count against its grants: the port holds about a packet.
TEST(Fabric, ReceiverCreditsKeepAnIncastQueueEmpty) {
  FabricConfig c;
  c.cc = "none";
  c.leaves = 4;
  c.spines = 4;
  c.hosts_per_leaf = 4;
  c.pattern = Pattern::kIncast;
  c.paths = 64;
  c.duration_ms = 5;
  const FabricResult plain = simulate(c);
  c.credits = true;
  const FabricResult credits = simulate(c);
  EXPECT_EQ(credits.flows, 15u);
  EXPECT_GE(plain.queue_delay_us.p99, 50.0);  // the 1 MB buffer, 80 us at 100 Gbit/s
  EXPECT_GT(plain.trimmed, 10000u);
  EXPECT_LE(credits.queue_delay_us.p99, 1.0);
  EXPECT_GE(credits.goodput_gbps, 0.99 * 100 * kPayloadShare);
  EXPECT_LT(credits.trimmed, plain.trimmed / 100);  // only the first windows' burst
  EXPECT_GT(credits.credits, 0u);
  // Finite flows: the incast completes in its bytes' serialisation time at the receiver.
  c.flow_kb = 2000;
  const FabricResult done = simulate(c);
  ASSERT_EQ(done.flows_done, 15u);
  const double ideal_ms = 15 * 2e6 * 8 / kPayloadShare / 100e9 * 1e3;
  EXPECT_LT(done.completion_ms, 1.02 * ideal_ms);
}

TEST(Fabric, BadConfigurationsAreRefused) {
  FabricConfig c;
  c.spines = 1;
  c.failed_spine = 0;
  EXPECT_NE(check(c), "");
  c = FabricConfig{};
  c.paths = 0;
  EXPECT_NE(check(c), "");
  c = FabricConfig{};
  c.leaves = 1;
  c.hosts_per_leaf = 1;
  EXPECT_NE(check(c), "");
  c = FabricConfig{};
  c.cc = "nope";
  EXPECT_NE(check(c), "");
  c = FabricConfig{};  // a controller per path: RTTCC over 2..256 paths sprayed obliviously
  c.path_cc = true;
  EXPECT_NE(check(c), "");  // one path
  c.paths = 4;
  EXPECT_EQ(check(c), "");
  c.spray = Spray::kReps;
  EXPECT_NE(check(c), "");
  c.spray = Spray::kOblivious;
  c.cc = "dcqcn";
  EXPECT_NE(check(c), "");
  EXPECT_EQ(check(FabricConfig{}), "");
}

}  // namespace
}  // namespace grex::ccsim
