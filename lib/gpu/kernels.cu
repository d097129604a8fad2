// SPDX-License-Identifier: Apache-2.0
// The kernels libgrex launches (lib/gpu/kernels.cc), with C names so the
// driver API finds them in the fatbin Meson embeds into libgrex:
//   grex_reduce_<kind>_<op>_<v|s>(T* d, const T* a, const T* b, size_t n)
//       v: the 16-byte vector body (d, a, b 16-byte aligned); s: element by element
//   grex_scale_<kind>(T* p, size_t n, int group)   kAvg's last step
// kind: f32 f64 i32 i64 u8 f16 bf16 (DataType's order); op: sum prod min max.
#include "gpu/reduce_kernels.cuh"

namespace g = grex::gpu;
namespace e = grex::elem;

// K comes in parentheses (a template argument list with a comma); GREX_STRIP drops them.
#define GREX_STRIP(...) __VA_ARGS__
#define GREX_REDUCE_ENTRY(kind, opname, K, T)                                                          \
  extern "C" __global__ void grex_reduce_##kind##_##opname##_v(T* d, const T* a, const T* b, size_t n) { \
    g::reduce_body<GREX_STRIP K, true>(d, a, b, n);                                                    \
  }                                                                                                    \
  extern "C" __global__ void grex_reduce_##kind##_##opname##_s(T* d, const T* a, const T* b, size_t n) { \
    g::reduce_body<GREX_STRIP K, false>(d, a, b, n);                                                   \
  }

#define GREX_NATIVE_ENTRIES(kind, T)                                           \
  GREX_REDUCE_ENTRY(kind, sum, (g::Native<T, e::Op::kSum>), T)                 \
  GREX_REDUCE_ENTRY(kind, prod, (g::Native<T, e::Op::kProd>), T)               \
  GREX_REDUCE_ENTRY(kind, min, (g::Native<T, e::Op::kMin>), T)                 \
  GREX_REDUCE_ENTRY(kind, max, (g::Native<T, e::Op::kMax>), T)

#define GREX_HALF_ENTRIES(kind, H)                                   \
  GREX_REDUCE_ENTRY(kind, sum, (g::H<e::Op::kSum>), uint16_t)        \
  GREX_REDUCE_ENTRY(kind, prod, (g::H<e::Op::kProd>), uint16_t)      \
  GREX_REDUCE_ENTRY(kind, min, (g::H<e::Op::kMin>), uint16_t)        \
  GREX_REDUCE_ENTRY(kind, max, (g::H<e::Op::kMax>), uint16_t)

GREX_NATIVE_ENTRIES(f32, float)
GREX_NATIVE_ENTRIES(f64, double)
GREX_NATIVE_ENTRIES(i32, int32_t)
GREX_NATIVE_ENTRIES(i64, int64_t)
GREX_NATIVE_ENTRIES(u8, uint8_t)
GREX_HALF_ENTRIES(f16, F16)
GREX_HALF_ENTRIES(bf16, Bf16)

extern "C" __global__ void grex_scale_f32(float* p, size_t n, int group) { g::scale_native<float>(p, n, group); }
extern "C" __global__ void grex_scale_f64(double* p, size_t n, int group) { g::scale_native<double>(p, n, group); }
extern "C" __global__ void grex_scale_i32(int32_t* p, size_t n, int group) { g::divide<int32_t>(p, n, group); }
extern "C" __global__ void grex_scale_i64(int64_t* p, size_t n, int group) { g::divide<int64_t>(p, n, group); }
extern "C" __global__ void grex_scale_u8(uint8_t* p, size_t n, int group) { g::divide<uint8_t>(p, n, group); }
extern "C" __global__ void grex_scale_f16(uint16_t* p, size_t n, int group) {
  g::scale_half<e::f16_to_f32, e::f32_to_f16>(p, n, group);
}
extern "C" __global__ void grex_scale_bf16(uint16_t* p, size_t n, int group) {
  g::scale_half<e::bf16_to_f32, e::f32_to_bf16>(p, n, group);
}
