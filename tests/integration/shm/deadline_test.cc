// SPDX-License-Identifier: Apache-2.0
// The deadline allreduce over shm (issue 29): ranks in time, one late
// (dropped or carried into its next call), every rank late; every rank gets
// the same contributors and bits; many calls with late ranks drawn at random;
// the arguments it refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "deadline_check.h"

namespace grex::test {
namespace {

TEST(Deadline, InTimeLateAndEveryRankLate) {
  for (int n : {2, 4}) {
    auto res = run_ranks(n, [](Rank& r) -> int {
      CommOptions o;
      o.backend = "shm";
      return deadline_rank(r, o, 100'003);
    }, 120);
    EXPECT_TRUE(res.all_ok()) << n << " ranks: " << res.describe();
  }
}

// 12 calls at 3 ranks, each rank late (by 150 ms, deadline 40 ms) in some
// calls, drawn from a seed every rank shares: every call's contributors and
// result agree on every rank, the result is the contributors' sum, and the
// late ranks' results arrive although nobody waited for them.
TEST(Deadline, ManyCallsWithRandomLateRanks) {
  auto res = run_ranks(3, [](Rank& r) -> int {
    CommOptions o;
    o.backend = "shm";
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    std::mt19937 gen(77);
    const size_t n = 4099;
    std::vector<int64_t> x(n), y(n);
    std::vector<int> in;
    AllreduceOptions d;
    d.deadline_ms = 40;
    d.contributors = &in;
    for (int call = 0; call < 12; ++call) {
      const unsigned lateness = gen() % 8;  // bit p: rank p late; all three late is every rank late
      if ((lateness >> r.rank) & 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
      for (size_t i = 0; i < n; ++i) x[i] = static_cast<int64_t>(r.rank + 1) * 1'000'000 + call * 1000 + i;
      RANK_OK(c->allreduce(x.data(), y.data(), n, DataType::kInt64, ReduceOp::kSum, d));
      RANK_CHECK(!in.empty());
      for (size_t i = 0; i < n; ++i) {
        int64_t want = 0;
        for (int p : in) want += static_cast<int64_t>(p + 1) * 1'000'000 + call * 1000 + i;
        RANK_CHECK(y[i] == want);
      }
      RANK_CHECK(same_everywhere(r, "many" + std::to_string(call), in, y.data(), n * 8));
    }
    RANK_OK(c->barrier());
    // The calls left no key in the store: the last rank to decide each erased them.
    std::vector<std::string> keys;
    for (int call = 1; call <= 12; ++call)
      for (const char* k : {"w0", "close", "set", "done"})
        keys.push_back(c->options().name + "/dl/" + std::to_string(call) + "/" + k);
    auto there = r.bootstrap->store().check(keys);
    RANK_OK(there);
    for (size_t i = 0; i < keys.size(); ++i)
      if ((*there)[i]) std::fprintf(stderr, "left in the store: %s\n", keys[i].c_str());
    RANK_CHECK(std::none_of(there->begin(), there->end(), [](bool b) { return b; }));
    return 0;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(Deadline, RefusedArguments) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    CommOptions o;
    o.backend = "shm";
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    float v[4] = {1, 2, 3, 4};
    AllreduceOptions d;
    d.deadline_ms = 10;
    d.compression = Compression::kBf16;
    auto e1 = c->allreduce(v, v, 4, DataType::kFloat32, ReduceOp::kSum, d);
    RANK_CHECK(!e1.ok() && e1.error().code() == Errc::kInvalidArgument);
    d.compression = Compression::kNone;
    d.late = LateInput::kCarry;
    auto e2 = c->allreduce(v, v, 4, DataType::kFloat32, ReduceOp::kMax, d);
    RANK_CHECK(!e2.ok() && e2.error().code() == Errc::kInvalidArgument);
    d.deadline_ms = -1;
    auto e3 = c->allreduce(v, v, 4, DataType::kFloat32, ReduceOp::kSum, d);
    RANK_CHECK(!e3.ok() && e3.error().code() == Errc::kInvalidArgument);
    RANK_OK(c->barrier());
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
}  // namespace grex::test
