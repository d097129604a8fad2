// SPDX-License-Identifier: Apache-2.0
// The Communicator over the DPDK backend (memif between real processes):
// ring allreduce with 2 and 4 ranks equals the reference; broadcast and
// barrier work. Skips where libgrex was built without DPDK.
#include <gtest/gtest.h>

#include <thread>

#include "../shm/collective_check.h"

namespace grex::test {
namespace {

class DpdkAllreduce : public ::testing::TestWithParam<int> {};

bool find_cc_wants_probes(const char* name) { return std::string(name) != "dcqcn"; }

TEST_P(DpdkAllreduce, MatchesReference) {
  bool have = false;
  for (const auto& d : Device::available_drivers()) have |= d == "dpdk";
  if (!have) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  auto res = run_ranks(GetParam(), [](Rank& r) -> int {
    CommOptions o;
    o.backend = "dpdk";
    o.timeout_ms = 60'000;
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1} << 20}) {
      RANK_CHECK(check_allreduce<float>(*c, count, DataType::kFloat32, ReduceOp::kSum, false) == 0);
      RANK_CHECK(check_allreduce<double>(*c, count, DataType::kFloat64, ReduceOp::kSum, true) == 0);
    }
    RANK_CHECK(check_allreduce<int32_t>(*c, 10001, DataType::kInt32, ReduceOp::kMax, false) == 0);
    std::vector<int32_t> v(300000, r.rank == 1 ? 5 : -1);
    RANK_OK(c->broadcast(v.data(), v.size(), DataType::kInt32, 1));
    for (int32_t x : v) RANK_CHECK(x == 5);
    for (int i = 0; i < 5; ++i) RANK_OK(c->barrier());
    return 0;
  }, 240);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Every collective with each allreduce algorithm forced (fixed cost
// constants: no calibration per communicator).
TEST_P(DpdkAllreduce, EveryCollectiveWithEachAlgorithm) {
  bool have = false;
  for (const auto& d : Device::available_drivers()) have |= d == "dpdk";
  if (!have) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  auto res = run_ranks(GetParam(), [](Rank& r) -> int {
    for (const char* algo : {"ring", "rabenseifner", "recursive_doubling", "tree"}) {
      CommOptions o;
      o.backend = "dpdk";
      o.timeout_ms = 60'000;
      o.algo = algo;
      o.cost = "5,5,5";
      o.name = std::string("every-") + algo;
      auto c = make_comm(r, o);
      RANK_CHECK(c != nullptr);
      RANK_CHECK(check_every_collective(*c) == 0);
    }
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Congestion control chosen per communicator (CommOptions::cc): every
// collective stays correct while each flow is paced by its controller, the
// controller's rate and probes show in the device counters; a name that is
// not a controller fails creation naming the ones that are.
TEST_P(DpdkAllreduce, PacedByEachCongestionController) {
  bool have = false;
  for (const auto& d : Device::available_drivers()) have |= d == "dpdk";
  if (!have) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)";
  if (GetParam() > static_cast<int>(std::thread::hardware_concurrency()))
    GTEST_SKIP() << "more ranks than cores: probe RTTs would measure the scheduler, and the delay-based "
                    "controllers pace down to their floor (docs/congestion.md)";
  auto res = run_ranks(GetParam(), [](Rank& r) -> int {
    for (const char* cc : {"rttcc", "rttcc-template", "dcqcn", "timely", "swift"}) {
      CommOptions o;
      o.backend = "dpdk";
      o.timeout_ms = 60'000;
      o.cost = "5,5,5";
      o.cc = cc;
      o.name = std::string("cc-") + cc;
      auto c = make_comm(r, o);
      RANK_CHECK(c != nullptr);
      RANK_CHECK(check_allreduce<float>(*c, size_t{1} << 20, DataType::kFloat32, ReduceOp::kSum, false) == 0);
      RANK_CHECK(check_every_collective(*c) == 0);
      uint64_t rate_kbps = 0, probes = 0;
      for (const auto& [k, v] : c->device().counters()) {
        if (k == "cc_min_rate_kbps") rate_kbps = v;
        if (k == "probes_sent") probes = v;
      }
      RANK_CHECK(rate_kbps > 0);  // a controller paced the flows
      if (find_cc_wants_probes(cc)) RANK_CHECK(probes > 0);
    }
    CommOptions bad;
    bad.backend = "dpdk";
    bad.cc = "cubic";
    bad.name = "cc-bad";
    auto made = Communicator::create(r.bootstrap, bad);
    RANK_CHECK(!made);
    RANK_CHECK(made.error().message().find("rttcc") != std::string::npos);
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

INSTANTIATE_TEST_SUITE_P(Memif, DpdkAllreduce, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
}  // namespace grex::test
