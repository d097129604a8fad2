// SPDX-License-Identifier: Apache-2.0
// The collectives' logic with no processes: N ranks as threads of this
// process, over the loop driver, meeting through a LocalStore. Every
// allreduce algorithm (forced by CommOptions::algo and by GREX_ALGO), with
// 2, 3 and 4 ranks, against a reference; broadcast, reduce_scatter,
// allgather, alltoall, reduce and barrier; results are the same bits on
// every rank.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../shm/collective_check.h"
#include "../shm/shm_opts.h"

namespace grex::test {
namespace {

constexpr const char* kAlgos[] = {"ring", "rabenseifner", "recursive_doubling", "tree", "direct", "staged", "flat"};

CommOptions loop_opts(const char* algo) {
  CommOptions o = opts_for(algo, 30'000);
  o.backend = "loop";
  o.name = std::string("loop-") + algo;
  return o;
}

// The same input on every rank's call sequence: f32 sums of every size
// class, i32 max in place, and a random vector reduced twice (the same bits)
// and broadcast from rank 0 (every rank holds what rank 0 holds).
int allreduce_checks(Communicator& c, int rank) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}, size_t{70'001}})
    RANK_CHECK(check_allreduce<float>(c, count, DataType::kFloat32, ReduceOp::kSum, count == 7) == 0);
  RANK_CHECK(check_allreduce<int32_t>(c, 10'007, DataType::kInt32, ReduceOp::kMax, true) == 0);
  RANK_CHECK(check_allreduce<double>(c, 1000, DataType::kFloat64, ReduceOp::kAvg, false) == 0);
  RANK_CHECK(check_allreduce<float>(c, size_t{1} << 20, DataType::kFloat32, ReduceOp::kSum, false) == 0);
  std::vector<float> x(100'003), a(x.size()), b(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u + static_cast<size_t>(rank)) % 9973) / 97.f;
  RANK_OK(c.allreduce(x.data(), a.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
  RANK_OK(c.allreduce(x.data(), b.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
  RANK_CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
  std::vector<float> root = a;
  RANK_OK(c.broadcast(root.data(), root.size(), DataType::kFloat32, 0));
  RANK_CHECK(std::memcmp(a.data(), root.data(), a.size() * 4) == 0);
  return 0;
}

class LoopRanks : public ::testing::TestWithParam<int> {};

TEST_P(LoopRanks, AllreduceEveryAlgorithm) {
  const int n = GetParam();
  for (const char* algo : kAlgos) {
    auto res = run_thread_ranks(n, [&](Rank& r) -> int {
      auto c = make_comm(r, loop_opts(algo));
      RANK_CHECK(c != nullptr);
      RANK_CHECK(c->device().capabilities().driver == "loop");
      if (c->allreduce_algorithm(1) != algo_name(algo))
        std::fprintf(stderr, "rank %d: asked for %s, runs %s\n", r.rank, algo, c->allreduce_algorithm(1).c_str());
      RANK_CHECK(c->allreduce_algorithm(1) == algo_name(algo));
      return allreduce_checks(*c, r.rank);
    }, 60'000);
    EXPECT_TRUE(res.all_ok()) << res.describe() << " (" << n << " ranks, " << algo << ")";
  }
}

// GREX_ALGO overrides CommOptions::algo (the environment is the process's:
// every thread's communicator sees it).
TEST_P(LoopRanks, GrexAlgoForcesTheAlgorithm) {
  const int n = GetParam();
  for (const char* algo : {"ring", "tree", "direct"}) {
    ::setenv("GREX_ALGO", algo, 1);
    auto res = run_thread_ranks(n, [&](Rank& r) -> int {
      auto c = make_comm(r, loop_opts("rabenseifner"));
      RANK_CHECK(c != nullptr);
      for (size_t bytes : {size_t{8}, size_t{1} << 16, size_t{1} << 24}) RANK_CHECK(c->allreduce_algorithm(bytes) == algo);
      return check_allreduce<float>(*c, 50'001, DataType::kFloat32, ReduceOp::kSum, false);
    }, 60'000);
    ::unsetenv("GREX_ALGO");
    EXPECT_TRUE(res.all_ok()) << res.describe() << " (" << n << " ranks, GREX_ALGO=" << algo << ")";
  }
}

// Every other collective, and barriers between them, on the cost model's own choices.
TEST_P(LoopRanks, EveryCollective) {
  const int n = GetParam();
  auto res = run_thread_ranks(n, [&](Rank& r) -> int {
    CommOptions o = loop_opts("auto");
    o.name = "loop-every";
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    for (int round = 0; round < 3; ++round) {
      RANK_OK(c->barrier());
      RANK_CHECK(check_every_collective(*c) == 0);
    }
    std::vector<int64_t> v(5000, r.rank == 1 ? 42 : -1);
    RANK_OK(c->broadcast(v.data(), v.size(), DataType::kInt64, 1));
    for (int64_t x : v) RANK_CHECK(x == 42);
    auto w = c->allreduce_async(v.data(), v.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
    RANK_OK(w);
    RANK_OK((*w)->wait());
    for (int64_t x : v) RANK_CHECK(x == 42 * n);
    RANK_OK(c->barrier());
    return 0;
  }, 60'000);
  EXPECT_TRUE(res.all_ok()) << res.describe() << " (" << n << " ranks)";
}

// Hosts given by CommOptions::host_id (threads of one process): shm between
// the ranks of a "host", the loop driver between hosts (the hybrid device,
// with no DPDK or RDMA device needed). Even, interleaved and uneven layouts;
// every collective with the hierarchical and flat allreduces.
class LoopHosts : public ::testing::TestWithParam<const char*> {};

TEST_P(LoopHosts, HybridShmAndLoopMatchTheReference) {
  const std::string layout = GetParam();
  const int n = static_cast<int>(layout.size());
  auto res = run_thread_ranks(n, [&](Rank& r) -> int {
    for (const char* algo : {"auto", "hierarchical", "ring"}) {
      CommOptions o = loop_opts(algo);
      o.backend = "auto";
      o.net = "loop";
      o.host_id = std::string("loop-host-") + layout[static_cast<size_t>(r.rank)];
      o.cost = "1,20,5;20,2,5";
      o.name = std::string("loop-hosts-") + algo;
      auto c = make_comm(r, o);
      RANK_CHECK(c != nullptr);
      RANK_CHECK(c->device().capabilities().driver == "shm+loop");
      RANK_CHECK(c->topology().find("intra-host shm, inter-host loop") != std::string::npos);
      RANK_CHECK(check_every_collective(*c) == 0);
      for (size_t count : {size_t{1}, size_t{4099}, (size_t{1} << 18) + 3}) {
        RANK_CHECK(check_allreduce<int32_t>(*c, count, DataType::kInt32, ReduceOp::kSum, false) == 0);
        RANK_CHECK(check_allreduce<double>(*c, count, DataType::kFloat64, ReduceOp::kAvg, true) == 0);
      }
      std::vector<int64_t> v(5000, r.rank == n - 1 ? 42 : -1);
      RANK_OK(c->broadcast(v.data(), v.size(), DataType::kInt64, n - 1));
      for (int64_t x : v) RANK_CHECK(x == 42);
      RANK_OK(c->barrier());
    }
    return 0;
  }, 60'000);
  EXPECT_TRUE(res.all_ok()) << res.describe() << " (" << layout << ")";
}

INSTANTIATE_TEST_SUITE_P(Layouts, LoopHosts, ::testing::Values("AABB", "ABAB", "AAB", "AABBB"),
                         [](const auto& i) { return std::string(i.param); });

INSTANTIATE_TEST_SUITE_P(Ranks, LoopRanks, ::testing::Values(2, 3, 4), [](const auto& i) {
  return std::to_string(i.param) + "ranks";
});

}  // namespace
}  // namespace grex::test
