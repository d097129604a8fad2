// SPDX-License-Identifier: Apache-2.0
// The alpha-beta-gamma model: with given constants it picks the expected
// allreduce algorithm on each side of the crossovers worked out by hand.
#include <gtest/gtest.h>

#include "collectives/algorithm.h"
#include "collectives/cost_model.h"
#include "collectives/hierarchy.h"

namespace grex::detail {
namespace {

CostModel model(double alpha_us, double beta_gbps, double gamma_gbps) {
  CostModel m;
  m.alpha_s = alpha_us * 1e-6;
  m.beta_s_per_byte = 1e-9 / beta_gbps;
  m.gamma_s_per_byte = 1e-9 / gamma_gbps;
  return m;
}

// n = 8, alpha 10 us, beta = gamma = 0.1 ns/B:
//   recursive doubling 3 alpha + 6 N b, Rabenseifner 6 alpha + 2.625 N b:
//   equal at N = alpha / (1.125 b) = 88 889 bytes; ring (14 alpha) never wins.
TEST(CostModel, PowerOfTwoCrossoverFromRecursiveDoublingToRabenseifner) {
  CostModel m = model(10, 10, 10);
  EXPECT_EQ(m.choose_allreduce(8, 8), Algo::kRecursiveDoubling);
  EXPECT_EQ(m.choose_allreduce(8, 80'000), Algo::kRecursiveDoubling);
  EXPECT_EQ(m.choose_allreduce(8, 100'000), Algo::kRabenseifner);
  EXPECT_EQ(m.choose_allreduce(8, size_t{256} << 20), Algo::kRabenseifner);
  EXPECT_NEAR(m.allreduce_s(Algo::kRecursiveDoubling, 8, 88'889), m.allreduce_s(Algo::kRabenseifner, 8, 88'889),
              1e-9);
}

// n = 6 (p = 4, two ranks fold in, costing 2 alpha + 3 N b): recursive
// doubling 4 alpha + 7 N b, Rabenseifner 6 alpha + 5.25 N b, ring 10 alpha +
// 2.5 N b. Crossovers: RD -> Rab at N = 2 alpha / (1.75 b) = 114 286;
// Rab -> ring at N = 4 alpha / (2.75 b) = 145 455.
TEST(CostModel, NonPowerOfTwoEndsWithTheRing) {
  CostModel m = model(10, 10, 10);
  EXPECT_EQ(m.choose_allreduce(6, 1024), Algo::kRecursiveDoubling);
  EXPECT_EQ(m.choose_allreduce(6, 110'000), Algo::kRecursiveDoubling);
  EXPECT_EQ(m.choose_allreduce(6, 120'000), Algo::kRabenseifner);
  EXPECT_EQ(m.choose_allreduce(6, 140'000), Algo::kRabenseifner);
  EXPECT_EQ(m.choose_allreduce(6, 150'000), Algo::kRing);
  EXPECT_EQ(m.choose_allreduce(6, size_t{1} << 30), Algo::kRing);
}

// A slow reduction (gamma) moves the crossovers: with 1 GB/s reduction the
// whole-vector recursive doubling loses much earlier.
TEST(CostModel, SlowReductionFavoursScatteringTheWork) {
  EXPECT_EQ(model(10, 10, 10).choose_allreduce(8, 40'000), Algo::kRecursiveDoubling);
  EXPECT_EQ(model(10, 10, 1).choose_allreduce(8, 40'000), Algo::kRabenseifner);
}

TEST(CostModel, TheChoiceIsNeverPredictedSlowerThanAnyAlgorithm) {
  CostModel m = model(3, 20, 8);
  for (int n : {2, 3, 4, 5, 7, 8, 12, 16, 33})
    for (double bytes : {0.0, 8.0, 4096.0, 1e5, 1e6, 1e8}) {
      Algo a = m.choose_allreduce(n, static_cast<size_t>(bytes));
      for (Algo b : kAllAlgos) EXPECT_LE(m.allreduce_s(a, n, bytes), m.allreduce_s(b, n, bytes) * (1 + 1e-9));
    }
  EXPECT_EQ(m.choose_allreduce(1, 1 << 20), Algo::kRing);  // one rank: nothing to choose
}

// Direct (shm) replaces ring and Rabenseifner. n = 4, alpha 10 us, beta =
// gamma = 0.1 ns/B: recursive doubling 2 alpha + 4 N b, direct 4 alpha +
// 2.25 N b: equal at N = 2 alpha / (1.75 b) = 114 286 bytes.
TEST(CostModel, DirectTakesOverTheBandwidthOptimalSizes) {
  CostModel m = model(10, 10, 10);
  EXPECT_EQ(m.choose_allreduce(4, 8, true), Algo::kRecursiveDoubling);
  EXPECT_EQ(m.choose_allreduce(4, 110'000, true), Algo::kRecursiveDoubling);
  EXPECT_EQ(m.choose_allreduce(4, 120'000, true), Algo::kDirect);
  EXPECT_EQ(m.choose_allreduce(4, size_t{256} << 20, true), Algo::kDirect);
  EXPECT_EQ(m.choose_allreduce(4, size_t{256} << 20, false), Algo::kRabenseifner);
  EXPECT_NEAR(m.allreduce_s(Algo::kRecursiveDoubling, 4, 114'286), m.allreduce_s(Algo::kDirect, 4, 114'286), 1e-9);
  for (int n : {2, 3, 5, 8, 16})
    for (double bytes : {8.0, 1e4, 1e6, 1e9}) {
      Algo a = m.choose_allreduce(n, static_cast<size_t>(bytes), true);
      EXPECT_NE(a, Algo::kRing);
      EXPECT_NE(a, Algo::kRabenseifner);
    }
}

TEST(CostModel, ParsesGrexCostAndNames) {
  auto m = CostModel::parse("2.5,10,8");
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_DOUBLE_EQ(m->alpha_s, 2.5e-6);
  EXPECT_DOUBLE_EQ(m->beta_s_per_byte, 1e-10);
  EXPECT_DOUBLE_EQ(m->gamma_s_per_byte, 1.25e-10);
  EXPECT_EQ(m->describe(), "2.500,10.000,8.000");
  EXPECT_FALSE(CostModel::parse("2.5,0,8"));
  EXPECT_FALSE(CostModel::parse("fast"));
  EXPECT_FALSE(CostModel::parse("1,2,3,4"));
  for (Algo a : kAllAlgos) EXPECT_EQ(parse_algo(algo_name(a)), a);
  EXPECT_EQ(parse_algo(algo_name(Algo::kDirect)), Algo::kDirect);
  EXPECT_EQ(parse_algo(algo_name(Algo::kFlat)), Algo::kFlat);
  EXPECT_EQ(parse_algo("rd"), Algo::kRecursiveDoubling);
  EXPECT_FALSE(parse_algo("bruck"));
}


// Across hosts (issue 27), the other collectives go hierarchical where the
// two-level model predicts them no slower than the flat schedule: with shm
// inside faster than the network, always; with a pathologically slow inside,
// not for large blocks.
TEST(CostModel, HierarchicalCollectivesWhereTheTwoLevelModelSaysSo) {
  std::vector<std::unique_ptr<Endpoint>> eps(4);
  detail::Engine engine(nullptr, &eps, 0);
  detail::Group world = detail::Group::world(engine, 0, 4);
  detail::Hierarchy h;
  h.hosts = {{0, 1}, {2, 3}};
  h.host_of = {0, 0, 1, 1};
  h.local_of = {0, 1, 0, 1};
  h.rails = 2;
  h.local.select.cost = *CostModel::parse("1,20,5");
  h.rail.select.cost = *CostModel::parse("20,2,5");
  h.world_cost = h.rail.select.cost;
  detail::Context c;
  c.hier = &h;
  for (detail::Coll k : {detail::Coll::kReduceScatter, detail::Coll::kAllgather, detail::Coll::kAlltoall,
                         detail::Coll::kBroadcast, detail::Coll::kReduce})
    for (double b : {8.0, 65536.0, 64e6}) EXPECT_TRUE(detail::hierarchical_wins(c, world, k, b)) << b;
  // Top-k 1 %: the exact sum inside a host costs more than the flat form's
  // pairs save on a network 10 x slower than shm; on one 400 x slower, less.
  EXPECT_FALSE(detail::hierarchical_topk_wins(c, 64e6, 0.01));
  h.rail.select.cost = h.world_cost = *CostModel::parse("20,0.05,5");
  EXPECT_TRUE(detail::hierarchical_topk_wins(c, 64e6, 0.01));
  EXPECT_FALSE(detail::hierarchical_topk_wins(c, 64e6, 0.001));
  h.rail.select.cost = h.world_cost = *CostModel::parse("20,2,5");
  h.local.select.cost = *CostModel::parse("100,0.1,5");  // an inside slower than the network
  EXPECT_FALSE(detail::hierarchical_wins(c, world, detail::Coll::kAllgather, 64e6));
  EXPECT_FALSE(detail::hierarchical_wins(c, world, detail::Coll::kBroadcast, 64e6));
}

}  // namespace
}  // namespace grex::detail
