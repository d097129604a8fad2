// SPDX-License-Identifier: Apache-2.0
// The Communicator over the verbs backend between real processes: ring
// allreduce with 2 and 4 ranks equals the reference (f32/f64/i32, sum/max,
// counts 0, 1, 7, 256 Ki), also into a buffer freed and mapped again at the
// same address; broadcast and barrier work. Sizes stay modest: in
// CI this runs on Soft-RoCE in a qemu VM under TCG. Skips like
// verbs_driver_test (see verbs_env.h).
#include <gtest/gtest.h>

#include <cstdio>

#include <sys/mman.h>

#include "../shm/any_source_check.h"
#include "../shm/collective_check.h"
#include "../shm/compressed_check.h"
#include "../shm/deadline_check.h"
#include "verbs_env.h"

namespace grex::test {
namespace {

CommOptions comm_options() {
  CommOptions o;
  o.backend = verbs_driver();
  o.timeout_ms = 120'000;
  o.device = verbs_options();
  return o;
}

class VerbsAllreduce : public ::testing::TestWithParam<int> {};

TEST_P(VerbsAllreduce, MatchesReference) {
  REQUIRE_VERBS();
  auto res = run_ranks(GetParam(), [](Rank& r) -> int {
    auto c = make_comm(r, comm_options());
    RANK_CHECK(c != nullptr);
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1} << 18}) {
      RANK_CHECK(check_allreduce<float>(*c, count, DataType::kFloat32, ReduceOp::kSum, false) == 0);
      RANK_CHECK(check_allreduce<double>(*c, count, DataType::kFloat64, ReduceOp::kSum, true) == 0);
      RANK_CHECK(check_allreduce<int32_t>(*c, count, DataType::kInt32, ReduceOp::kSum, false) == 0);
      RANK_CHECK(check_allreduce<float>(*c, count, DataType::kFloat32, ReduceOp::kMax, true) == 0);
      RANK_CHECK(check_allreduce<double>(*c, count, DataType::kFloat64, ReduceOp::kMax, false) == 0);
      RANK_CHECK(check_allreduce<int32_t>(*c, count, DataType::kInt32, ReduceOp::kMax, true) == 0);
    }
    std::vector<int32_t> v(300'000, r.rank == 1 ? 5 : -1);
    RANK_OK(c->broadcast(v.data(), v.size(), DataType::kInt32, 1));
    for (int32_t x : v) RANK_CHECK(x == 5);
    for (int i = 0; i < 5; ++i) RANK_OK(c->barrier());
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// recv_any and iprobe over verbs: the notices' receives stay posted
// across calls (sizes modest, as above).
TEST_P(VerbsAllreduce, ReceivesFromAnySource) {
  REQUIRE_VERBS();
  auto res = run_ranks(GetParam(), [](Rank& r) -> int { return any_source_rank(r, comm_options(), 300'000); }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// The compressed allreduce over verbs (as over dpdk).
TEST_P(VerbsAllreduce, Compressed) {
  REQUIRE_VERBS();
  auto res = run_ranks(GetParam(), [](Rank& r) -> int {
    RANK_CHECK(check_bounds(r, Compression::kBf16, ReduceOp::kAvg, false, comm_options()) == 0);
    RANK_CHECK(check_bounds(r, Compression::kInt8, ReduceOp::kSum, true, comm_options()) == 0);
    return check_topk_exact(r, comm_options());
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// The deadline allreduce over verbs.
TEST_P(VerbsAllreduce, DeadlineAllreduce) {
  REQUIRE_VERBS();
  auto res = run_ranks(GetParam(), [](Rank& r) -> int { return deadline_rank(r, comm_options(), 30'001); }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// A user buffer freed and a new one mapped at the same address (as malloc
// does all the time) holds new pages: a registration kept from the first one
// (a cached verbs MR pins the old pages) must not be used for the second.
// Each round mmaps 1 MiB, at the address the previous round unmapped where
// the kernel allows, and allreduces it in place.
TEST_P(VerbsAllreduce, BufferFreedAndMappedAgainAtSameAddress) {
  REQUIRE_VERBS();
  auto res = run_ranks(GetParam(), [](Rank& r) -> int {
    auto c = make_comm(r, comm_options());
    RANK_CHECK(c != nullptr);
    constexpr size_t kCount = 1u << 18;
    constexpr size_t kBytes = kCount * sizeof(int32_t);
    const int32_t n = r.size;
    void* last = nullptr;
    int reused = 0;
    for (int32_t round = 0; round < 4; ++round) {
      void* p = MAP_FAILED;
      if (last != nullptr)
        p = ::mmap(last, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (p == MAP_FAILED) p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      RANK_CHECK(p != MAP_FAILED);
      reused += p == last;
      auto* v = static_cast<int32_t*>(p);
      for (size_t i = 0; i < kCount; ++i) v[i] = static_cast<int32_t>(i % 1000) + round * 1000 * (r.rank + 1);
      RANK_OK(c->allreduce(v, kCount, DataType::kInt32, ReduceOp::kSum));
      for (size_t i = 0; i < kCount; ++i) {
        int32_t want = n * static_cast<int32_t>(i % 1000) + round * 1000 * n * (n + 1) / 2;
        if (v[i] != want) {
          std::fprintf(stderr, "rank %d round %d (buffer %p, %s address): element %zu: got %d want %d\n", r.rank,
                       round, p, p == last ? "same" : "new", i, v[i], want);
          return 1;
        }
      }
      RANK_CHECK(::munmap(p, kBytes) == 0);
      last = p;
    }
    std::fprintf(stderr, "rank %d: %d of 3 buffers mapped again at the freed address\n", r.rank, reused);
    RANK_OK(c->barrier());
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Every collective with each allreduce algorithm forced (fixed cost
// constants: no calibration per communicator).
TEST_P(VerbsAllreduce, EveryCollectiveWithEachAlgorithm) {
  REQUIRE_VERBS();
  auto res = run_ranks(GetParam(), [](Rank& r) -> int {
    for (const char* algo : {"ring", "rabenseifner", "recursive_doubling", "tree"}) {
      CommOptions o = comm_options();
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

// Congestion control on verbs (CommOptions::cc): every QP is paced by its
// controller; RTT samples come from signalled zero-length RDMA WRITEs, which
// Soft-RoCE must accept without an address or key. Results stay correct and
// the counters show probes, samples and a rate.
TEST_P(VerbsAllreduce, PacedByRttcc) {
  REQUIRE_VERBS();
  auto res = run_ranks(GetParam(), [](Rank& r) -> int {
    for (const char* cc : {"rttcc", "swift"}) {
      CommOptions o = comm_options();
      o.cost = "5,5,5";
      o.cc = cc;
      o.device.params["cc_target_us"] = "5000";  // Soft-RoCE in a VM: RTTs of milliseconds
      o.name = std::string("cc-") + cc;
      auto c = make_comm(r, o);
      RANK_CHECK(c != nullptr);
      RANK_CHECK(check_allreduce<float>(*c, size_t{1} << 18, DataType::kFloat32, ReduceOp::kSum, false) == 0);
      RANK_CHECK(check_every_collective(*c) == 0);
      const uint64_t probes = device_counter(*c, "probes_sent"), samples = device_counter(*c, "rtt_samples"),
                     rate = device_counter(*c, "cc_min_rate_kbps");
      if (r.rank == 0) std::printf("%s: probes %llu, samples %llu, lowest rate %llu kbit/s\n", cc,
                                   static_cast<unsigned long long>(probes), static_cast<unsigned long long>(samples),
                                   static_cast<unsigned long long>(rate));
      RANK_CHECK(probes > 0);
      RANK_CHECK(samples > 0);
      RANK_CHECK(rate > 0);
      // The NIC's per-QP limit is set where it is offered for RC, never elsewhere.
      const uint64_t nic_updates = device_counter(*c, "nic_rate_updates");
      if (device_counter(*c, "nic_rate_limit_max_kbps") == 0) RANK_CHECK(nic_updates == 0);
      else RANK_CHECK(nic_updates > 0);
    }
    return 0;
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

INSTANTIATE_TEST_SUITE_P(Verbs, VerbsAllreduce, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
}  // namespace grex::test
