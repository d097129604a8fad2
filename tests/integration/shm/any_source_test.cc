// SPDX-License-Identifier: Apache-2.0
// Receives from any source over shm (CommOptions::any_source): recv_any and
// iprobe at 2 to 4 ranks, a timeout that leaves the communicator usable, a
// rank that is gone named by the receive waiting on anyone, and the refusals
// (option off, ranks that disagree on it).
#include <gtest/gtest.h>

#include "any_source_check.h"

namespace grex::test {
namespace {

TEST(AnySource, RecvAnyAndIprobeOverShm) {
  for (int n : {2, 3, 4}) {
    auto res = run_ranks(n, [](Rank& r) -> int {
      CommOptions o;
      o.backend = "shm";
      return any_source_rank(r, o);
    });
    EXPECT_TRUE(res.all_ok()) << n << " ranks: " << res.describe();
  }
}

// Nobody sends: kTimeout after the communicator's timeout, and the
// communicator goes on (nothing was posted for the message).
TEST(AnySource, TimeoutLeavesTheCommunicatorUsable) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    CommOptions o;
    o.backend = "shm";
    o.any_source = true;
    o.timeout_ms = 300;
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    if (r.rank == 0) {
      uint32_t v = 0;
      auto t = c->recv_any(&v, sizeof v, 5);
      RANK_CHECK(!t.ok() && t.error().code() == Errc::kTimeout);
      RANK_CHECK(t.error().message().find("tag 5") != std::string::npos);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(450));  // past rank 0's timeout, within its barrier's
    }
    RANK_OK(c->barrier());
    uint32_t v = 3 + static_cast<uint32_t>(r.rank);
    if (r.rank == 1) RANK_OK(c->send(&v, sizeof v, 0, 5));
    if (r.rank == 0) {
      auto from = c->recv_any(&v, sizeof v, 5);
      RANK_OK(from);
      RANK_CHECK(*from == 1 && v == 4);
    }
    float x = 1;
    RANK_OK(c->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum));
    RANK_CHECK(x == 2.0f);
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Rank 2 of 3 exits without sending while rank 0 waits on anyone: rank 0's
// error names rank 2 well before the timeout.
TEST(AnySource, AGoneRankIsNamed) {
  auto res = run_ranks(3, [](Rank& r) -> int {
    CommOptions o;
    o.backend = "shm";
    o.any_source = true;
    o.timeout_ms = 30'000;
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    RANK_OK(c->barrier());
    RANK_OK(r.bootstrap->barrier("past-barrier"));  // rank 2 leaves once every rank is past the barrier
    if (r.rank == 2) ::_exit(0);
    if (r.rank == 1) std::this_thread::sleep_for(std::chrono::seconds(3));  // alive, sending nothing
    if (r.rank == 0) {
      uint32_t v = 0;
      const auto t0 = std::chrono::steady_clock::now();
      auto e = c->recv_any(&v, sizeof v, 9);
      const auto waited = std::chrono::steady_clock::now() - t0;
      RANK_CHECK(!e.ok() && e.error().code() == Errc::kPeerFailed && e.error().peer_rank() == 2);
      RANK_CHECK(waited < std::chrono::seconds(10));
    }
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(AnySource, RefusedWithoutTheOptionAndWhenRanksDisagree) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    CommOptions o;
    o.backend = "shm";
    o.precedence = Precedence::kOptions;
    {
      auto c = make_comm(r, o);
      RANK_CHECK(c != nullptr);
      uint32_t v = 0;
      auto e = c->recv_any(&v, sizeof v, 0);
      RANK_CHECK(!e.ok() && e.error().code() == Errc::kInvalidArgument);
      RANK_CHECK(e.error().message().find("GREX_P2P_ANY_SOURCE") != std::string::npos);
      auto p = c->iprobe(0);
      RANK_CHECK(!p.ok() && p.error().code() == Errc::kInvalidArgument);
      RANK_OK(c->barrier());
    }
    o.name = "disagree";
    o.any_source = r.rank == 1;
    auto bad = Communicator::create(r.bootstrap, o);
    RANK_CHECK(!bad.ok() && bad.error().code() == Errc::kMismatch);
    RANK_CHECK(bad.error().message().find("any-source") != std::string::npos);
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
}  // namespace grex::test
