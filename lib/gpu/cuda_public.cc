// SPDX-License-Identifier: Apache-2.0
// grex/cuda.h: device memory and copies over the driver API grex loads.
#include <grex/cuda.h>

#include "gpu/cuda_api.h"

namespace grex::cuda {
namespace {

Result<const gpu::CudaApi*> api() {
  const gpu::CudaApi* a = GREX_TRY(gpu::cuda());
  if (!a->has_streams) return Error(Errc::kNotSupported, "the CUDA driver lacks the calls grex needs");
  return a;
}

Error fail(const gpu::CudaApi* a, const char* call, gpu::CUresult r) {
  return Error(r == 2 ? Errc::kNoMemory : Errc::kSystem, std::string(call) + ": " + a->describe(r));  // 2: out of memory
}

}  // namespace

Result<std::string> describe(int device) {
  const gpu::CudaApi* a = GREX_TRY(api());
  gpu::CUdevice d = 0;
  if (gpu::CUresult r = a->cuDeviceGet(&d, device); r != 0) return fail(a, "cuDeviceGet", r);
  char name[256] = {};
  a->cuDeviceGetName(name, sizeof name, d);
  return std::string(name) + " (CUDA driver " + std::to_string(a->driver_version / 1000) + "." +
         std::to_string(a->driver_version % 1000 / 10) + ")";
}

Result<void*> alloc(size_t bytes, int device) {
  const gpu::CudaApi* a = GREX_TRY(api());
  gpu::CUdevice d = 0;
  gpu::CUcontext ctx = nullptr;
  if (gpu::CUresult r = a->cuDeviceGet(&d, device); r != 0) return fail(a, "cuDeviceGet", r);
  if (gpu::CUresult r = a->cuDevicePrimaryCtxRetain(&ctx, d); r != 0) return fail(a, "cuDevicePrimaryCtxRetain", r);
  if (gpu::CUresult r = a->cuCtxSetCurrent(ctx); r != 0) return fail(a, "cuCtxSetCurrent", r);
  gpu::CUdeviceptr p = 0;
  if (gpu::CUresult r = a->cuMemAlloc(&p, bytes > 0 ? bytes : 1); r != 0)
    return fail(a, ("cuMemAlloc(" + std::to_string(bytes) + ")").c_str(), r);
  return reinterpret_cast<void*>(p);
}

Result<void> free(void* p) {
  if (p == nullptr) return ok();
  const gpu::CudaApi* a = GREX_TRY(api());
  if (gpu::CUresult r = a->cuMemFree(reinterpret_cast<gpu::CUdeviceptr>(p)); r != 0) return fail(a, "cuMemFree", r);
  return ok();
}

Result<void> copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return ok();
  const gpu::CudaApi* a = GREX_TRY(api());
  if (gpu::CUresult r = a->cuMemcpyAsync(reinterpret_cast<gpu::CUdeviceptr>(dst),
                                         reinterpret_cast<gpu::CUdeviceptr>(src), bytes, nullptr);
      r != 0)
    return fail(a, "cuMemcpyAsync", r);
  if (gpu::CUresult r = a->cuStreamSynchronize(nullptr); r != 0) return fail(a, "cuStreamSynchronize", r);
  return ok();
}

Result<void> synchronize(GpuStream stream) {
  const gpu::CudaApi* a = GREX_TRY(api());
  if (gpu::CUresult r = a->cuStreamSynchronize(static_cast<gpu::CUstream>(stream.handle)); r != 0)
    return fail(a, "cuStreamSynchronize", r);
  return ok();
}

}  // namespace grex::cuda
