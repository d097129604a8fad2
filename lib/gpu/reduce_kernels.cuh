// SPDX-License-Identifier: Apache-2.0
// The GPU reduction kernels: d[i] = a[i] (op) b[i] for every element kind grex
// reduces, grid-stride, 16 bytes per thread and step (one uint4 load from each
// input, one store), the element arithmetic from reduce_elem.h so every value
// is the bits the CPU kernels give. Elements past the last whole 16 bytes go
// one by one. Compiled by nvcc only (sm_80, sm_90); never --use_fast_math.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/reduce_elem.h"

namespace grex::gpu {

/// How one element kind reduces: T the storage type, and one() the element op.
template <class T, elem::Op op>
struct Native {
  using Storage = T;
  __device__ static T one(T x, T y) { return elem::reduce_one<op>(x, y); }
};
template <elem::Op op>
struct F16 {
  using Storage = uint16_t;
  __device__ static uint16_t one(uint16_t x, uint16_t y) { return elem::reduce_f16<op>(x, y); }
};
template <elem::Op op>
struct Bf16 {
  using Storage = uint16_t;
  __device__ static uint16_t one(uint16_t x, uint16_t y) { return elem::reduce_bf16<op>(x, y); }
};

/// d = a (op) b over n elements. d, a and b must be 16-byte aligned for the
/// vector body (the launcher checks; otherwise it launches with vec = false).
/// d may be a or b (each element is read before it is written, by one thread).
template <class K, bool vec>
__device__ inline void reduce_body(typename K::Storage* d, const typename K::Storage* a,
                                   const typename K::Storage* b, size_t n) {
  using T = typename K::Storage;
  constexpr size_t kPer = 16 / sizeof(T);  // elements per 16 bytes
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  size_t first = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  size_t done = 0;
  if constexpr (vec) {
    const size_t nv = n / kPer;
    for (size_t v = first; v < nv; v += stride) {
      union Pack {
        uint4 u;
        T e[kPer];
      } x, y, z;
      x.u = reinterpret_cast<const uint4*>(a)[v];
      y.u = reinterpret_cast<const uint4*>(b)[v];
#pragma unroll
      for (size_t k = 0; k < kPer; ++k) z.e[k] = K::one(x.e[k], y.e[k]);
      reinterpret_cast<uint4*>(d)[v] = z.u;
    }
    done = nv * kPer;
  }
  for (size_t i = done + first; i < n; i += stride) d[i] = K::one(a[i], b[i]);
}

template <class K, bool vec>
__global__ void reduce_kernel(typename K::Storage* d, const typename K::Storage* a,
                              const typename K::Storage* b, size_t n) {
  reduce_body<K, vec>(d, a, b, n);
}

/// kAvg's last step, as the CPU's scale_avg (lib/collectives/reduce.cc):
/// floats times the group's reciprocal (f16 and bf16 through f32), the
/// canonical NaN; integers divided, truncating.
template <class T>
__device__ inline void scale_native(T* p, size_t n, int group) {
  const T inv = T{1} / static_cast<T>(group);
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += stride) p[i] = elem::canonical(p[i] * inv);
}
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
__device__ inline void scale_half(uint16_t* p, size_t n, int group) {
  const float inv = 1.0f / static_cast<float>(group);
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += stride)
    p[i] = Narrow(elem::canonical(Widen(p[i]) * inv));
}
template <class T>
__device__ inline void divide(T* p, size_t n, int group) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += stride)
    p[i] = static_cast<T>(p[i] / group);
}

}  // namespace grex::gpu
