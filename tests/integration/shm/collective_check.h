// SPDX-License-Identifier: Apache-2.0
// Allreduce against a reference, shared by the collectives suites of every backend.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <type_traits>
#include <vector>

#include "harness.h"

namespace grex::test {

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
