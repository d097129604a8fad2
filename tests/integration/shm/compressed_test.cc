// SPDX-License-Identifier: Apache-2.0
// Compressed allreduce (issue 29) over shm, 2 to 4 ranks: bf16, fp16 and
// int8 results within their rounding bounds of the exact sum and the same bits on
// every rank, in and out of place, sum and avg; error feedback keeps the
// running sum of many calls within a bound where the plain compressed call
// drifts away; a streamed output (large, out of place) with the bits of a
// direct one; arguments it cannot take, and ranks that disagree on it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compressed_check.h"

namespace grex::test {
namespace {

TEST(Compressed, EachFormatWithinItsRoundingOnEveryRank) {
  for (int ranks : {2, 3, 4})
    for (Compression kind : {Compression::kBf16, Compression::kFp16, Compression::kInt8})
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg})
        for (bool in_place : {false, true}) {
          auto res = run_ranks(ranks, [&](Rank& r) { return check_bounds(r, kind, op, in_place); });
          EXPECT_TRUE(res.all_ok()) << ranks << " ranks: " << res.describe();
        }
}

// The ring's steps run as one pipeline, each chunk posted once the step
// before has made it: counts that leave some segments empty or end in a
// short block, and chunks of 4 KiB, so that every step holds many chunks
// and the window of chunks in flight spans steps.
TEST(Compressed, OddCountsAndManyChunksPerStep) {
  CommOptions small;
  small.chunk_bytes = 4096;
  for (int ranks : {3, 4})
    for (Compression kind : {Compression::kBf16, Compression::kInt8})
      for (size_t n : {size_t{1}, size_t{3}, size_t{257}, size_t{3 * 256 + 5}, size_t{100'003}}) {
        auto res = run_ranks(ranks, [&](Rank& r) {
          return check_bounds(r, kind, ReduceOp::kAvg, false, n == 100'003 ? small : CommOptions{}, n);
        });
        EXPECT_TRUE(res.all_ok()) << ranks << " ranks, " << n << " values: " << res.describe();
      }
  auto res = run_ranks(2, [&](Rank& r) { return check_bounds(r, Compression::kInt8, ReduceOp::kSum, true, small); });
  EXPECT_TRUE(res.all_ok()) << "2 ranks in place: " << res.describe();
}

// 1000 calls of one input that bf16 cannot hold (1 + 2^-10 rounds to 1):
// with error feedback the running sum of the results stays within a few
// roundings of the exact running sum; without, it falls behind by 2^-10 per
// rank per call.
TEST(Compressed, ErrorFeedbackKeepsTheRunningSumBounded) {
  for (int ranks : {2, 3}) {  // 2: no middle step of the ring, 3: one
    auto res = run_ranks(ranks, [](Rank& r) -> int {
      auto c = make_comm(r);
      RANK_CHECK(c != nullptr);
      const size_t n = 257;
      const float x = 1.0f + std::ldexp(1.0f, -10) * static_cast<float>(r.rank + 1);
      double exact_step = 0;
      for (int q = 0; q < r.size; ++q) exact_step += 1.0 + std::ldexp(1.0, -10) * (q + 1);
      std::vector<float> in(n, x), out(n);
      double worst[2] = {0, 0}, final_drift[2] = {0, 0};
      for (int fb = 0; fb < 2; ++fb) {
        AllreduceOptions o;
        o.compression = Compression::kBf16;
        o.error_feedback = fb == 1;
        std::vector<double> running(n, 0.0);
        for (int t = 1; t <= 1000; ++t) {
          RANK_OK(c->allreduce(in.data(), out.data(), n, DataType::kFloat32, ReduceOp::kSum, o));
          for (size_t i = 0; i < n; ++i) {
            running[i] += out[i];
            const double drift = std::fabs(running[i] - exact_step * t);
            worst[fb] = std::max(worst[fb], drift);
            if (t == 1000) final_drift[fb] = std::max(final_drift[fb], drift);
          }
        }
      }
      // A few roundings of a value near 3 (bf16's step there is 2^-6).
      const double bound = r.size * 2 * std::ldexp(1.0, -6);
      if (r.rank == 0)
        std::printf("  running sum after 1000 calls: drift %.4f with feedback (worst %.4f, bound %.4f), %.4f without\n",
                    final_drift[1], worst[1], bound, final_drift[0]);
      RANK_CHECK(worst[1] <= bound);
      RANK_CHECK(final_drift[0] > 10 * bound);  // the feedback is what keeps it
      // The residual is per key: clearing it starts afresh.
      RANK_OK(c->clear_feedback(out.data()));
      RANK_OK(c->clear_feedback());
      return 0;
    });
    EXPECT_TRUE(res.all_ok()) << ranks << " ranks: " << res.describe();
  }
}

// int8 with the same input every call (a gradient that repeats): each call
// rounds it the same way, so without feedback the error piles up call after
// call; with it the running sum of 1000 calls stays within a few steps.
TEST(Compressed, Int8ErrorFeedbackKeepsTheRunningSumBounded) {
  for (int ranks : {2, 3}) {  // 2: no middle step of the ring, 3: one
    auto res = run_ranks(ranks, [](Rank& r) -> int {
      auto c = make_comm(r);
      RANK_CHECK(c != nullptr);
      const size_t n = 1000;
      std::vector<double> exact(n, 0.0);
      for (int q = 0; q < r.size; ++q) {
        auto v = random_input(q, n);
        for (size_t i = 0; i < n; ++i) exact[i] += v[i];
      }
      std::vector<float> in = random_input(r.rank, n), out(n);
      double drift[2] = {0, 0};
      for (int fb = 0; fb < 2; ++fb) {
        AllreduceOptions o;
        o.compression = Compression::kInt8;
        o.error_feedback = fb == 1;
        std::vector<double> running(n, 0.0);
        for (int t = 1; t <= 1000; ++t) {
          RANK_OK(c->allreduce(in.data(), out.data(), n, DataType::kFloat32, ReduceOp::kSum, o));
          for (size_t i = 0; i < n; ++i) running[i] += out[i];
        }
        for (size_t i = 0; i < n; ++i) drift[fb] = std::max(drift[fb], std::fabs(running[i] - exact[i] * 1000));
      }
      // Every rank's residual within a step of partial sums up to n in size.
      const double bound = r.size * 2.0 * r.size / 127;
      if (r.rank == 0)
        std::printf("  int8 running sum after 1000 calls: drift %.4f with feedback (bound %.4f), %.4f without\n",
                    drift[1], bound, drift[0]);
      RANK_CHECK(drift[1] <= bound);
      RANK_CHECK(drift[0] > 10 * bound);
      return 0;
    });
    EXPECT_TRUE(res.all_ok()) << ranks << " ranks: " << res.describe();
  }
}

// Top-k: every value sent (fraction 1) gives the exact sum of small
// integers, the same bits everywhere; a tenth sent with error feedback keeps
// the running sum of 300 calls within a few inputs' worth of the exact one,
// while without feedback the values never sent are lost call after call.
TEST(Compressed, TopKExactWhenAllIsSentAndBoundedWithFeedback) {
  for (int ranks : {2, 3}) {
    auto res = run_ranks(ranks, [](Rank& r) -> int {
      RANK_CHECK(check_topk_exact(r) == 0);
      RANK_CHECK(check_topk_feedback(r) == 0);
      auto c = make_comm(r);
      RANK_CHECK(c != nullptr);
      const size_t n = 5000;
      std::vector<float> in = random_input(r.rank, n), out(n);
      AllreduceOptions o;
      o.compression = Compression::kTopK;
      o.topk_fraction = 0;
      auto bad = c->allreduce(in.data(), out.data(), n, DataType::kFloat32, ReduceOp::kSum, o);
      RANK_CHECK(!bad.ok() && bad.error().code() == Errc::kInvalidArgument);
      return 0;
    });
    EXPECT_TRUE(res.all_ok()) << ranks << " ranks: " << res.describe();
  }
}

// Past kStreamOutputMinBytes (8 MiB of output), out of place, the output is
// written with streaming stores through a buffer in L1; in place it is
// written directly. Both must give the same bits, and leave the same
// residuals behind: two calls each (the second adds the first's residual),
// with pieces, int8 blocks and segments that end in tails.
TEST(Compressed, StreamedOutputHasTheBitsOfTheDirectOne) {
  for (int ranks : {2, 3}) {
    auto res = run_ranks(ranks, [](Rank& r) -> int {
      auto c = make_comm(r);
      RANK_CHECK(c != nullptr);
      const size_t n = 2'100'003;  // 8.01 MiB of float32
      const std::vector<float> in = random_input(r.rank, n);
      std::vector<float> out(n), direct(n);
      for (Compression kind : {Compression::kBf16, Compression::kFp16, Compression::kInt8})
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg})
          for (bool feedback : {false, true}) {
            AllreduceOptions o;
            o.compression = kind;
            o.error_feedback = feedback;
            for (int call = 0; call < 2; ++call) {
              RANK_OK(c->allreduce(in.data(), out.data(), n, DataType::kFloat32, op, o));
              direct = in;
              RANK_OK(c->allreduce(direct.data(), direct.data(), n, DataType::kFloat32, op, o));
              size_t first = n;
              for (size_t i = 0; i < n && first == n; ++i)
                if (std::memcmp(&out[i], &direct[i], sizeof(float)) != 0) first = i;
              if (first != n)
                std::fprintf(stderr, "format %d op %d feedback %d call %d: element %zu %a streamed, %a direct\n",
                             static_cast<int>(kind), static_cast<int>(op), feedback, call, first, out[first],
                             direct[first]);
              RANK_CHECK(first == n);
            }
            RANK_OK(c->clear_feedback());
          }
      return 0;
    });
    EXPECT_TRUE(res.all_ok()) << ranks << " ranks: " << res.describe();
  }
}

TEST(Compressed, RefusesWhatItCannotCompress) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto c = make_comm(r);
    RANK_CHECK(c != nullptr);
    AllreduceOptions o;
    o.compression = Compression::kFp16;
    double d[4] = {1, 2, 3, 4};
    auto e = c->allreduce(d, d, 4, DataType::kFloat64, ReduceOp::kSum, o);
    RANK_CHECK(!e.ok() && e.error().code() == Errc::kInvalidArgument);
    RANK_CHECK(e.error().message().find("float32") != std::string::npos);
    float f[4] = {1, 2, 3, 4};
    e = c->allreduce(f, f, 4, DataType::kFloat32, ReduceOp::kMax, o);
    RANK_CHECK(!e.ok() && e.error().code() == Errc::kInvalidArgument);
    o.compression = static_cast<Compression>(9);
    RANK_CHECK(!c->allreduce(f, f, 4, DataType::kFloat32, ReduceOp::kSum, o).ok());
    // Nothing was sent: the communicator goes on.
    o.compression = Compression::kNone;
    RANK_OK(c->allreduce(f, f, 4, DataType::kFloat32, ReduceOp::kSum, o));
    RANK_CHECK(f[0] == 2 && f[3] == 8);
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// One rank compresses, the other does not: both fail within the timeout and
// the error says the ranks disagree on the call.
TEST(Compressed, RanksThatDisagreeOnCompressionAreTold) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    CommOptions co;
    co.timeout_ms = 1500;
    auto c = make_comm(r, co);
    RANK_CHECK(c != nullptr);
    std::vector<float> v(1 << 16, 1.f);
    AllreduceOptions o;
    o.compression = r.rank == 0 ? Compression::kBf16 : Compression::kNone;
    auto e = c->allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum, o);
    RANK_CHECK(!e.ok());
    if (r.rank == 0) std::printf("  %s\n", e.error().message().c_str());
    RANK_CHECK(e.error().code() == Errc::kMismatch || e.error().code() == Errc::kTimeout ||
               e.error().code() == Errc::kPeerFailed);
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
}  // namespace grex::test
