// SPDX-License-Identifier: Apache-2.0
// Allreduce against a reference, shared by the collectives suites of every backend.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <type_traits>
#include <string_view>
#include <vector>

#include "harness.h"

namespace grex::test {

/// A device counter by name (0 when the device does not report it).
inline uint64_t device_counter(Communicator& c, std::string_view name) {
  for (const auto& [k, v] : c.device().counters())
    if (k == name) return v;
  return 0;
}

// Rank r's input element i: small integers, so float sums are exact in any order.
template <class T>
inline T input(int r, size_t i) {
  return static_cast<T>(static_cast<int64_t>((i * 31 + static_cast<size_t>(r) * 17) % 1000) - 500);
}

template <class T>
int check_allreduce(Communicator& c, size_t count, DataType dt, ReduceOp op, bool in_place) {
  std::vector<T> in(count), out(count, T(-12345));
  for (size_t i = 0; i < count; ++i) in[i] = input<T>(c.rank(), i);
  if (in_place) {
    RANK_OK(c.allreduce(in.data(), count, dt, op));
    out = in;
  } else {
    RANK_OK(c.allreduce(in.data(), out.data(), count, dt, op));
  }
  for (size_t i = 0; i < count; ++i) {
    T want = input<T>(0, i);
    for (int r = 1; r < c.size(); ++r) {
      T v = input<T>(r, i);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: want = want + v; break;
        case ReduceOp::kMin: want = std::min(want, v); break;
        case ReduceOp::kMax: want = std::max(want, v); break;
        case ReduceOp::kProd: want = want * v; break;
      }
    }
    if (op == ReduceOp::kAvg) want = want / static_cast<T>(c.size());
    bool good = std::is_floating_point_v<T> ? std::fabs(double(out[i]) - double(want)) <= 1e-6 * (1 + std::fabs(double(want)))
                                            : out[i] == want;
    if (!good) {
      std::fprintf(stderr, "rank %d: count %zu element %zu: got %g want %g\n", c.rank(), count, i, double(out[i]),
                   double(want));
      return 1;
    }
  }
  return 0;
}

}  // namespace grex::test

namespace grex::test {

// Every collective once, small enough for slow transports (Soft-RoCE under
// TCG): allreduce, reduce_scatter, allgather, alltoall, reduce to the last
// rank, each against values every rank can compute. 0 when all are right.
inline int check_every_collective(Communicator& c) {
  const int n = c.size(), me = c.rank();
  const size_t un = static_cast<size_t>(n);
  for (size_t count : {size_t{1}, size_t{7}, size_t{4099}})
    if (check_allreduce<float>(c, count, DataType::kFloat32, ReduceOp::kSum, count == 7) != 0) return 1;
  constexpr size_t kBlock = 1000;
  std::vector<int32_t> in(kBlock * un), out(kBlock * un, -1);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>((i * 13 + static_cast<size_t>(me) * 101) % 997);
  RANK_OK(c.reduce_scatter(in.data(), out.data(), kBlock, DataType::kInt32, ReduceOp::kMax));
  for (size_t i = 0; i < kBlock; ++i) {
    size_t g = static_cast<size_t>(me) * kBlock + i;
    int32_t want = 0;
    for (size_t r = 0; r < un; ++r) want = std::max(want, static_cast<int32_t>((g * 13 + r * 101) % 997));
    RANK_CHECK(out[i] == want);
  }
  std::vector<int32_t> mine(kBlock, me * 7 + 1), all(kBlock * un, -1);
  RANK_OK(c.allgather(mine.data(), all.data(), kBlock, DataType::kInt32));
  for (size_t r = 0; r < un; ++r) RANK_CHECK(all[r * kBlock + kBlock - 1] == static_cast<int32_t>(r * 7 + 1));
  for (size_t j = 0; j < un; ++j)
    for (size_t i = 0; i < kBlock; ++i) in[j * kBlock + i] = static_cast<int32_t>(j * 100000 + static_cast<size_t>(me) * 1000 + i);
  RANK_OK(c.alltoall(in.data(), out.data(), kBlock, DataType::kInt32));
  for (size_t src = 0; src < un; ++src)
    for (size_t i = 0; i < kBlock; i += 97)
      RANK_CHECK(out[src * kBlock + i] == static_cast<int32_t>(static_cast<size_t>(me) * 100000 + src * 1000 + i));
  std::vector<double> v(3001, me + 1.0), sum(v.size(), 0);
  RANK_OK(c.reduce(v.data(), me == n - 1 ? sum.data() : nullptr, v.size(), DataType::kFloat64, ReduceOp::kSum, n - 1));
  if (me == n - 1) RANK_CHECK(sum[3000] == n * (n + 1) / 2.0);
  return 0;
}

}  // namespace grex::test
