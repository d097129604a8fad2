// SPDX-License-Identifier: Apache-2.0
// The reduction kernels of kernels.cu, launched through the driver API from
// the fatbin Meson embedded into libgrex (kernels_fatbin.cc): one module per
// CUDA context, loaded on first use. Element kinds and ops are DataType's and
// ReduceOp's values (kAvg: reduce as kSum, then scale()).
#pragma once

#include <grex/result.h>

#include <cstddef>
#include <cstdint>

#include "gpu/cuda_api.h"

namespace grex::gpu {

/// The embedded image; its size is 0 where nvcc was not found at build time.
extern const unsigned char kKernelsFatbin[];
extern const size_t kKernelsFatbinSize;

inline constexpr int kKernelKinds = 7;  ///< f32 f64 i32 i64 u8 f16 bf16 (DataType's order)

class Kernels {
 public:
  /// The kernels of the calling thread's current context (loaded once per
  /// context). kNotSupported where libgrex was built without nvcc or the
  /// driver lacks the calls; kNotFound without CUDA.
  static Result<const Kernels*> for_current_context();

  /// d = a (op) b over n elements of `kind`, queued on `s`. op: 0 sum, 1
  /// prod, 2 min, 3 max. d may be a or b.
  Result<void> reduce(CUstream s, void* d, const void* a, const void* b, size_t n, int kind, int op) const;
  /// kAvg's last step on n elements: floats times 1/group, integers divided.
  Result<void> scale(CUstream s, void* p, size_t n, int kind, int group) const;

 private:
  const CudaApi* api_ = nullptr;
  CUfunction reduce_[kKernelKinds][4][2] = {};  // [kind][op][vector]
  CUfunction scale_[kKernelKinds] = {};
  unsigned grid_ = 1;
  friend struct KernelLoader;
};

}  // namespace grex::gpu
