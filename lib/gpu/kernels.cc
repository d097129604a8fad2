// SPDX-License-Identifier: Apache-2.0
#include "gpu/kernels.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace grex::gpu {
namespace {

constexpr const char* kKind[kKernelKinds] = {"f32", "f64", "i32", "i64", "u8", "f16", "bf16"};
constexpr size_t kSize[kKernelKinds] = {4, 8, 4, 8, 1, 2, 2};
constexpr const char* kOp[4] = {"sum", "prod", "min", "max"};
constexpr unsigned kBlock = 256;

}  // namespace

struct KernelLoader {
  static Result<std::unique_ptr<Kernels>> load(const CudaApi* a) {
    auto k = std::make_unique<Kernels>();
    k->api_ = a;
    CUmodule mod = nullptr;
    if (CUresult r = a->cuModuleLoadData(&mod, kKernelsFatbin); r != 0)
      return Error(Errc::kNotSupported, "loading grex's GPU kernels: cuModuleLoadData: " + a->describe(r))
          .hint("the driver may be older than the kernels' CUDA 13 (sm_80, sm_90, compute_90 PTX)");
    auto get = [&](const std::string& name, CUfunction* f) -> Result<void> {
      if (CUresult r = a->cuModuleGetFunction(f, mod, name.c_str()); r != 0)
        return Error(Errc::kInternal, "grex's GPU kernels lack " + name + ": " + a->describe(r));
      return ok();
    };
    for (int kind = 0; kind < kKernelKinds; ++kind) {
      for (int op = 0; op < 4; ++op) {
        const std::string base = std::string("grex_reduce_") + kKind[kind] + "_" + kOp[op];
        GREX_TRY(get(base + "_s", &k->reduce_[kind][op][0]));
        GREX_TRY(get(base + "_v", &k->reduce_[kind][op][1]));
      }
      GREX_TRY(get(std::string("grex_scale_") + kKind[kind], &k->scale_[kind]));
    }
    CUdevice dev = 0;
    int sms = 0;
    if (a->cuCtxGetDevice(&dev) == 0 && a->cuDeviceGetAttribute(&sms, kAttrMultiprocessorCount, dev) == 0 && sms > 0)
      k->grid_ = static_cast<unsigned>(sms) * 8;  // 8 blocks of 256 per SM: copy speed on an H100
    return k;
  }
};

Result<const Kernels*> Kernels::for_current_context() {
  const CudaApi* a = GREX_TRY(cuda());
  if (kKernelsFatbinSize == 0)
    return Error(Errc::kNotSupported, "libgrex was built without nvcc: no GPU kernels")
        .hint("rebuild where nvcc is found (meson option cuda)");
  if (!a->has_kernels) return Error(Errc::kNotSupported, "the CUDA driver lacks the calls grex's kernels need");
  CUcontext ctx = nullptr;
  if (a->cuCtxGetCurrent(&ctx) != 0 || ctx == nullptr)
    return Error(Errc::kInvalidArgument, "grex's GPU kernels: no current CUDA context");
  static std::mutex mu;
  static auto* loaded = new std::map<CUcontext, std::unique_ptr<Kernels>>;  // never freed: used until exit
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*loaded)[ctx];
  if (!slot) slot = GREX_TRY(KernelLoader::load(a));
  return slot.get();
}

Result<void> Kernels::reduce(CUstream s, void* d, const void* a, const void* b, size_t n, int kind, int op) const {
  if (kind < 0 || kind >= kKernelKinds || op < 0 || op > 3)
    return Error(Errc::kInvalidArgument, "GPU reduce: no kernel for kind " + std::to_string(kind) + " op " +
                                             std::to_string(op));
  if (n == 0) return ok();
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  const bool vec = aligned(d) && aligned(a) && aligned(b);
  const size_t work = vec ? (n * kSize[kind] + 15) / 16 : n;
  const auto blocks = static_cast<unsigned>(std::min<size_t>(grid_, (work + kBlock - 1) / kBlock));
  void* params[] = {&d, const_cast<void**>(&a), const_cast<void**>(&b), &n};
  if (CUresult r = api_->cuLaunchKernel(reduce_[kind][op][vec ? 1 : 0], blocks, 1, 1, kBlock, 1, 1, 0, s, params,
                                        nullptr);
      r != 0)
    return Error(Errc::kSystem, std::string("GPU reduce: cuLaunchKernel: ") + api_->describe(r));
  return ok();
}

Result<void> Kernels::scale(CUstream s, void* p, size_t n, int kind, int group) const {
  if (kind < 0 || kind >= kKernelKinds) return Error(Errc::kInvalidArgument, "GPU scale: no kernel for this kind");
  if (n == 0) return ok();
  const auto blocks = static_cast<unsigned>(std::min<size_t>(grid_, (n + kBlock - 1) / kBlock));
  void* params[] = {&p, &n, &group};
  if (CUresult r = api_->cuLaunchKernel(scale_[kind], blocks, 1, 1, kBlock, 1, 1, 0, s, params, nullptr); r != 0)
    return Error(Errc::kSystem, std::string("GPU scale: cuLaunchKernel: ") + api_->describe(r));
  return ok();
}

}  // namespace grex::gpu
