// SPDX-License-Identifier: Apache-2.0
// Reduction kernels against scalar references, including aliasing and odd lengths.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "collectives/reduce.h"

namespace grex::detail {
namespace {

template <class T>
void check_all_ops(DataType dt) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{33}, size_t{1000003}}) {
    std::vector<T> a(n), b(n), d(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = static_cast<T>((i * 7) % 13 + 1);
      b[i] = static_cast<T>((i * 5) % 11 + 1);
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
      reduce(d.data(), a.data(), b.data(), n, dt, op);
      for (size_t i = 0; i < n; ++i) {
        T want = op == ReduceOp::kSum    ? static_cast<T>(a[i] + b[i])
                 : op == ReduceOp::kProd ? static_cast<T>(a[i] * b[i])
                 : op == ReduceOp::kMin  ? std::min(a[i], b[i])
                                         : std::max(a[i], b[i]);
        ASSERT_EQ(d[i], want) << "n=" << n << " i=" << i << " op=" << reduce_op_name(op);
      }
    }
    // In place: dst aliases a.
    std::vector<T> c = a;
    reduce(c.data(), c.data(), b.data(), n, dt, ReduceOp::kSum);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(c[i], static_cast<T>(a[i] + b[i]));
  }
}

TEST(Reduce, Float32) { check_all_ops<float>(DataType::kFloat32); }
TEST(Reduce, Float64) { check_all_ops<double>(DataType::kFloat64); }
TEST(Reduce, Int32) { check_all_ops<int32_t>(DataType::kInt32); }
TEST(Reduce, Int64) { check_all_ops<int64_t>(DataType::kInt64); }
TEST(Reduce, Uint8Wraps) {
  check_all_ops<uint8_t>(DataType::kUint8);
  uint8_t a = 200, b = 100, d = 0;
  reduce(&d, &a, &b, 1, DataType::kUint8, ReduceOp::kSum);
  EXPECT_EQ(d, 44);
}

TEST(Reduce, AvgScalesBySize) {
  std::vector<float> f = {4, 8, -12};
  scale_avg(f.data(), f.size(), DataType::kFloat32, 4);
  EXPECT_EQ(f, (std::vector<float>{1, 2, -3}));
  std::vector<int32_t> i = {9, -9};
  scale_avg(i.data(), i.size(), DataType::kInt32, 2);
  EXPECT_EQ(i, (std::vector<int32_t>{4, -4}));
}

}  // namespace
}  // namespace grex::detail
