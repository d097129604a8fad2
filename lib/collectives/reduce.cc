// SPDX-License-Identifier: Apache-2.0
// Reduction kernels: plain loops the compiler vectorises, cloned for AVX2 and AVX-512
// and picked at load time (ifunc), so one binary runs on any x86-64.
#include "collectives/reduce.h"

#include <algorithm>
#include <cstdint>

namespace grex::detail {
namespace {

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define GREX_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3")))
#else
#define GREX_SIMD_CLONES __attribute__((optimize("O3")))
#endif

template <class T>
struct Sum { static T apply(T x, T y) { return x + y; } };
template <class T>
struct Prod { static T apply(T x, T y) { return x * y; } };
template <class T>
struct Min { static T apply(T x, T y) { return y < x ? y : x; } };
template <class T>
struct Max { static T apply(T x, T y) { return x < y ? y : x; } };

// One instantiation per (type, op) so each loop is a simple vectorisable body.
#define GREX_KERNEL(NAME, T, OP)                                                            \
  GREX_SIMD_CLONES void NAME(T* d, const T* a, const T* b, size_t n) {        \
    for (size_t i = 0; i < n; ++i) d[i] = OP<T>::apply(a[i], b[i]);                         \
  }
#define GREX_KERNELS(SUFFIX, T) \
  GREX_KERNEL(sum_##SUFFIX, T, Sum) GREX_KERNEL(prod_##SUFFIX, T, Prod) \
  GREX_KERNEL(min_##SUFFIX, T, Min) GREX_KERNEL(max_##SUFFIX, T, Max)

GREX_KERNELS(f32, float)
GREX_KERNELS(f64, double)
GREX_KERNELS(i32, int32_t)
GREX_KERNELS(i64, int64_t)
GREX_KERNELS(u8, uint8_t)

template <class T>
using KernelFn = void (*)(T*, const T*, const T*, size_t);

template <class T>
void run(KernelFn<T> const (&table)[4], void* dst, const void* a, const void* b, size_t n, ReduceOp op) {
  int i = op == ReduceOp::kAvg ? 0 : static_cast<int>(op);
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  table[i](d, x, y, n);
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op) noexcept {
  switch (type) {
    case DataType::kFloat32: {
      static KernelFn<float> const t[4] = {sum_f32, prod_f32, min_f32, max_f32};
      run<float>(t, dst, a, b, count, op);
      break;
    }
    case DataType::kFloat64: {
      static KernelFn<double> const t[4] = {sum_f64, prod_f64, min_f64, max_f64};
      run<double>(t, dst, a, b, count, op);
      break;
    }
    case DataType::kInt32: {
      static KernelFn<int32_t> const t[4] = {sum_i32, prod_i32, min_i32, max_i32};
      run<int32_t>(t, dst, a, b, count, op);
      break;
    }
    case DataType::kInt64: {
      static KernelFn<int64_t> const t[4] = {sum_i64, prod_i64, min_i64, max_i64};
      run<int64_t>(t, dst, a, b, count, op);
      break;
    }
    case DataType::kUint8: {
      static KernelFn<uint8_t> const t[4] = {sum_u8, prod_u8, min_u8, max_u8};
      run<uint8_t>(t, dst, a, b, count, op);
      break;
    }
  }
}

void scale_avg(void* buf, size_t count, DataType type, int n) noexcept {
  switch (type) {
    case DataType::kFloat32: {
      auto* p = static_cast<float*>(buf);
      float inv = 1.0f / static_cast<float>(n);
      for (size_t i = 0; i < count; ++i) p[i] *= inv;
      break;
    }
    case DataType::kFloat64: {
      auto* p = static_cast<double*>(buf);
      double inv = 1.0 / n;
      for (size_t i = 0; i < count; ++i) p[i] *= inv;
      break;
    }
    case DataType::kInt32: {
      auto* p = static_cast<int32_t*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] /= n;
      break;
    }
    case DataType::kInt64: {
      auto* p = static_cast<int64_t*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] /= n;
      break;
    }
    case DataType::kUint8: {
      auto* p = static_cast<uint8_t*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] = static_cast<uint8_t>(p[i] / n);
      break;
    }
  }
}

}  // namespace grex::detail
