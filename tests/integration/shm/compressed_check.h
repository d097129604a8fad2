// SPDX-License-Identifier: Apache-2.0
// The compressed allreduce's checks on whatever backend `opts` names (shm,
// dpdk and verbs run them alike): every element within the format's rounding
// bound of the exact sum and the same bits on every rank; top-k with
// fraction 1 exact.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "harness.h"

namespace grex::test {

inline std::vector<float> random_input(int rank, size_t n) {
  std::mt19937 gen(1234u + static_cast<unsigned>(rank));
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

inline uint64_t fnv(const void* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  return h;
}

// Every rank's result within n roundings (2^-8 relative for bf16, 2^-11 for
// fp16, of at most the sum of magnitudes each) of the exact sum, and the
// same bits on every rank.
inline int check_bounds(Rank& r, Compression kind, ReduceOp op, bool in_place, CommOptions opts = {},
                        size_t n = 100'003) {
  auto c = make_comm(r, opts);
  RANK_CHECK(c != nullptr);
  const int size = r.size;
  std::vector<double> exact(n, 0.0), mag(n, 0.0);
  for (int q = 0; q < size; ++q) {
    auto v = random_input(q, n);
    for (size_t i = 0; i < n; ++i) exact[i] += v[i], mag[i] += std::fabs(v[i]);
  }
  std::vector<float> in = random_input(r.rank, n), out(n, -99.f);
  AllreduceOptions o;
  o.compression = kind;
  float* dst = in_place ? in.data() : out.data();
  RANK_OK(c->allreduce(in.data(), dst, n, DataType::kFloat32, op, o));
  const double unit = kind == Compression::kBf16   ? std::ldexp(1.0, -8)
                      : kind == Compression::kFp16 ? std::ldexp(1.0, -11)
                                                   : 1.0 / 254;  // int8: half a step of its block's max / 127
  const double div = op == ReduceOp::kAvg ? size : 1;
  // int8 rounds against its block's largest magnitude (blocks of 256 within
  // a segment): the largest within 255 elements either way bounds it.
  std::vector<double> scale_of(mag);
  if (kind == Compression::kInt8) {
    for (size_t i = 0; i < n; ++i) {
      double m = 0;
      for (size_t j = i >= 255 ? i - 255 : 0; j < std::min(n, i + 256); ++j) m = std::max(m, mag[j]);
      scale_of[i] = m;
    }
  }
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double err = std::fabs(dst[i] - exact[i] / div), bound = size * unit * scale_of[i] / div * (1 + 1e-5) + 1e-30;
    if (err > bound) {
      std::fprintf(stderr, "element %zu: %g, exact %g, error %g over the bound %g\n", i, dst[i], exact[i] / div, err,
                   bound);
      return 1;
    }
    worst = std::max(worst, err / (scale_of[i] / div + 1e-30));
  }
  uint64_t h = fnv(dst, n * 4), first = h;
  RANK_OK(c->broadcast(&first, 1, DataType::kInt64, 0));
  RANK_CHECK(h == first);  // the same bits everywhere
  if (r.rank == 0)
    std::printf("  %s %s %d ranks%s, %zu values: worst error %.2e of the magnitudes' sum (bound %.2e)\n",
                kind == Compression::kBf16 ? "bf16" : kind == Compression::kFp16 ? "fp16" : "int8",
                std::string(reduce_op_name(op)).c_str(), size, in_place ? " in place" : "", n, worst, size * unit);
  return 0;
}

// Top-k with fraction 1 sends every value: the exact sum, the same bits on
// every rank.
inline int check_topk_exact(Rank& r, CommOptions opts = {}) {
  auto c = make_comm(r, opts);
  RANK_CHECK(c != nullptr);
  const size_t n = 3 * 16384 + 77;  // the sum's blocks and a tail
  std::vector<float> in(n), out(n);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>((static_cast<int>(i) + r.rank) % 9 - 4);
  AllreduceOptions o;
  o.compression = Compression::kTopK;
  o.topk_fraction = 1.0;
  RANK_OK(c->allreduce(in.data(), out.data(), n, DataType::kFloat32, ReduceOp::kSum, o));
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int q = 0; q < r.size; ++q) want += static_cast<float>((static_cast<int>(i) + q) % 9 - 4);
    RANK_CHECK(out[i] == want);
  }
  return 0;
}

// Top-k, a tenth of random values sent in each call: with error feedback the
// running sum of 300 calls stays within a few inputs' worth of the exact one
// (a bounded residual), while without it the values never sent are lost call
// after call; every rank ends with the same bits.
inline int check_topk_feedback(Rank& r, CommOptions opts = {}) {
  auto c = make_comm(r, opts);
  RANK_CHECK(c != nullptr);
  const size_t n = 5000;
  std::vector<float> in = random_input(r.rank, n), out(n);
  std::vector<double> exact(n, 0.0);
  for (int q = 0; q < r.size; ++q) {
    auto v = random_input(q, n);
    for (size_t i = 0; i < n; ++i) exact[i] += v[i];
  }
  AllreduceOptions o;
  o.compression = Compression::kTopK;
  o.topk_fraction = 0.1;
  double drift[2] = {0, 0};
  for (int fb = 0; fb < 2; ++fb) {
    o.error_feedback = fb == 1;
    RANK_OK(c->clear_feedback());
    std::vector<double> running(n, 0.0);
    for (int t = 1; t <= 300; ++t) {
      RANK_OK(c->allreduce(in.data(), out.data(), n, DataType::kFloat32, ReduceOp::kSum, o));
      for (size_t i = 0; i < n; ++i) running[i] += out[i];
    }
    for (size_t i = 0; i < n; ++i) drift[fb] = std::max(drift[fb], std::fabs(running[i] - exact[i] * 300));
  }
  uint64_t h = fnv(out.data(), n * 4), first = h;
  RANK_OK(c->broadcast(&first, 1, DataType::kInt64, 0));
  RANK_CHECK(h == first);
  if (r.rank == 0)
    std::printf("  top-k 10%%, %d ranks, 300 calls: drift %.3f with feedback, %.3f without\n", r.size, drift[1],
                drift[0]);
  RANK_CHECK(drift[1] < 0.1 * drift[0]);
  RANK_CHECK(drift[1] < 20.0 * r.size);  // a bounded residual: at most some calls' worth of |x| <= 1 per rank
  return 0;
}

}  // namespace grex::test
