// SPDX-License-Identifier: Apache-2.0
// The top-k allreduce's sum of every rank's pairs (collectives/topk_pairs.h):
// the one-pass form for pairs in index order gives the plain scatter's bits
// (zeros, then each rank's pairs added in rank order), over several blocks
// with a tail, for sums and averages, small and streamed outputs; pairs out
// of order take the scatter and still sum right; pairs past the vector are
// left out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "collectives/reduce.h"
#include "collectives/topk_pairs.h"

namespace grex::detail {
namespace {

// Rank r's pairs: about `density` of the indices, in order, random values.
struct Pairs {
  std::vector<TopkPair> all;
  std::vector<uint32_t> counts;
  size_t most = 0;
};

Pairs make_pairs(size_t count, size_t n, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> v(-4.f, 4.f);
  std::bernoulli_distribution take(density);
  std::vector<std::vector<TopkPair>> per(n);
  for (size_t r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      if (take(rng)) per[r].push_back(TopkPair{static_cast<uint32_t>(i), v(rng)});
  Pairs p;
  for (const auto& x : per) p.most = std::max(p.most, x.size());
  p.all.assign(p.most * n, TopkPair{UINT32_MAX, 0.f});  // padded as the allgather pads them
  for (size_t r = 0; r < n; ++r) {
    std::copy(per[r].begin(), per[r].end(), p.all.begin() + static_cast<std::ptrdiff_t>(r * p.most));
    p.counts.push_back(static_cast<uint32_t>(per[r].size()));
  }
  return p;
}

std::vector<float> scatter(size_t count, const Pairs& p, size_t n, int n_avg) {
  std::vector<float> out(count, 0.f);
  for (size_t r = 0; r < n; ++r)
    for (size_t j = 0; j < p.counts[r]; ++j) {
      const TopkPair& x = p.all[r * p.most + j];
      if (x.index < count) out[x.index] += x.value;
    }
  if (n_avg > 0) scale_avg(out.data(), count, DataType::kFloat32, n_avg);
  return out;
}

TEST(TopkPairs, OnePassGivesTheScattersBits) {
  // 3 x 16384 + 77 floats (blocks and a tail); 3 M floats (12 MiB: streamed).
  for (size_t count : {size_t{3 * 16384 + 77}, size_t{3u << 20}}) {
    for (size_t n : {size_t{2}, size_t{3}}) {
      for (double density : {0.01, 0.5}) {
        const Pairs p = make_pairs(count, n, density, count + n);
        ASSERT_TRUE(topk_ordered(p.all.data(), p.counts.data(), p.most, n));
        for (int n_avg : {0, static_cast<int>(n)}) {
          std::vector<float> got(count, 7.f);  // whatever was there is overwritten
          topk_sum_pairs(got.data(), count, p.all.data(), p.counts.data(), p.most, n, n_avg);
          const std::vector<float> want = scatter(count, p, n, n_avg);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), count * sizeof(float)), 0)
              << count << " floats, " << n << " ranks, density " << density << ", avg " << n_avg;
        }
      }
    }
  }
}

TEST(TopkPairs, PairsOutOfOrderStillSumRightAndPairsPastTheEndAreLeftOut) {
  const size_t count = 40000, n = 3;
  Pairs p = make_pairs(count, n, 0.05, 11);
  const std::vector<float> want = scatter(count, p, n, 0);
  // Rank 1's pairs reversed: not in order (each index still once per rank).
  std::reverse(p.all.begin() + static_cast<std::ptrdiff_t>(p.most),
               p.all.begin() + static_cast<std::ptrdiff_t>(p.most + p.counts[1]));
  ASSERT_FALSE(topk_ordered(p.all.data(), p.counts.data(), p.most, n));
  std::vector<float> got(count, 7.f);
  topk_sum_pairs(got.data(), count, p.all.data(), p.counts.data(), p.most, n, 0);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), count * sizeof(float)), 0);
  // A vector shorter than the pairs reach: the pairs past it are left out.
  const Pairs q = make_pairs(count, n, 0.05, 12);
  const size_t shorter = count / 2 + 5;
  std::vector<float> part(shorter, 7.f);
  topk_sum_pairs(part.data(), shorter, q.all.data(), q.counts.data(), q.most, n, 0);
  const std::vector<float> whole = scatter(count, q, n, 0);
  EXPECT_EQ(std::memcmp(part.data(), whole.data(), shorter * sizeof(float)), 0);
}

}  // namespace
}  // namespace grex::detail
