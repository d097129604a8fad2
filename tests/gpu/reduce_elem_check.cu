// SPDX-License-Identifier: Apache-2.0
// Compiles gpu/reduce_elem.h for the device (sm_80, sm_90): one grid-stride
// kernel per element kind and op, built by Meson wherever nvcc is found, so
// the header the CPU kernels are tested against stays device code. The GPU
// suite (tests/gpu/device-check.sh) runs kernels built from the same header.
#include <cstdint>

#include "gpu/reduce_elem.h"

namespace {

template <grex::elem::Op op, class T>
__global__ void reduce_native(T* d, const T* a, const T* b, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    d[i] = grex::elem::reduce_one<op>(a[i], b[i]);
}

template <grex::elem::Op op, bool bf16>
__global__ void reduce_half(uint16_t* d, const uint16_t* a, const uint16_t* b, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    d[i] = bf16 ? grex::elem::reduce_bf16<op>(a[i], b[i]) : grex::elem::reduce_f16<op>(a[i], b[i]);
}

template <grex::elem::Op op>
void instantiate() {
  (void)&reduce_native<op, float>;
  (void)&reduce_native<op, double>;
  (void)&reduce_native<op, int32_t>;
  (void)&reduce_native<op, int64_t>;
  (void)&reduce_native<op, uint8_t>;
  (void)&reduce_half<op, false>;
  (void)&reduce_half<op, true>;
}

}  // namespace

void grex_reduce_elem_check() {
  instantiate<grex::elem::Op::kSum>();
  instantiate<grex::elem::Op::kProd>();
  instantiate<grex::elem::Op::kMin>();
  instantiate<grex::elem::Op::kMax>();
}
