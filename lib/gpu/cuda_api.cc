// SPDX-License-Identifier: Apache-2.0
#include "gpu/cuda_api.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <mutex>
#include <optional>

#include "mem/domain.h"

namespace grex::gpu {
namespace {

constexpr uint64_t kGpuPageBytes = 64 * 1024;  // dma-buf export granularity asked for by CUDA: 64 KiB suffices

struct Loaded {
  CudaApi api;
  void* handle = nullptr;
  std::optional<Error> error;
};

template <typename Fn>
bool bind(void* lib, const char* name, Fn*& out) {
  out = reinterpret_cast<Fn*>(::dlsym(lib, name));
  return out != nullptr;
}

Loaded load() {
  Loaded l;
  l.handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (l.handle == nullptr) {
    const char* why = ::dlerror();
    l.error = Error(Errc::kNotFound, std::string("no CUDA driver (") + (why != nullptr ? why : "libcuda.so.1") + ")")
                  .hint("GPU buffers need the NVIDIA driver; host buffers work without it");
    return l;
  }
  CudaApi& a = l.api;
  const char* missing = nullptr;
  auto need = [&](const char* name, auto*& fn) {
    if (!bind(l.handle, name, fn) && missing == nullptr) missing = name;
  };
  need("cuInit", a.cuInit);
  need("cuDriverGetVersion", a.cuDriverGetVersion);
  need("cuDeviceGetCount", a.cuDeviceGetCount);
  need("cuDeviceGet", a.cuDeviceGet);
  need("cuDeviceGetName", a.cuDeviceGetName);
  need("cuDeviceGetAttribute", a.cuDeviceGetAttribute);
  need("cuDeviceTotalMem_v2", a.cuDeviceTotalMem);
  need("cuPointerGetAttribute", a.cuPointerGetAttribute);
  need("cuGetErrorString", a.cuGetErrorString);
  if (missing != nullptr) {
    l.error = Error(Errc::kNotSupported, std::string("libcuda.so.1 lacks ") + missing).hint("update the NVIDIA driver");
    return l;
  }
  // Since CUDA 11.7; older drivers still serve peermem registration.
  bind(l.handle, "cuMemGetHandleForAddressRange", a.cuMemGetHandleForAddressRange);
  bool streams = true;
  auto want = [&](const char* name, auto*& fn) { streams = bind(l.handle, name, fn) && streams; };
  want("cuCtxGetCurrent", a.cuCtxGetCurrent);
  want("cuCtxSetCurrent", a.cuCtxSetCurrent);
  want("cuEventCreate", a.cuEventCreate);
  want("cuEventDestroy_v2", a.cuEventDestroy);
  want("cuEventRecord", a.cuEventRecord);
  want("cuEventQuery", a.cuEventQuery);
  want("cuEventSynchronize", a.cuEventSynchronize);
  want("cuStreamWaitEvent", a.cuStreamWaitEvent);
  want("cuStreamSynchronize", a.cuStreamSynchronize);
  want("cuStreamQuery", a.cuStreamQuery);
  want("cuMemcpyAsync", a.cuMemcpyAsync);
  want("cuMemHostAlloc", a.cuMemHostAlloc);
  want("cuMemFreeHost", a.cuMemFreeHost);
  want("cuMemHostGetDevicePointer_v2", a.cuMemHostGetDevicePointer);
  want("cuMemHostRegister_v2", a.cuMemHostRegister);
  want("cuMemHostUnregister", a.cuMemHostUnregister);
  want("cuDevicePrimaryCtxRetain", a.cuDevicePrimaryCtxRetain);
  want("cuMemAlloc_v2", a.cuMemAlloc);
  want("cuMemFree_v2", a.cuMemFree);
  want("cuMemsetD8Async", a.cuMemsetD8Async);
  want("cuStreamCreate", a.cuStreamCreate);
  a.has_streams = streams;
  bool kernels = true;
  auto want_k = [&](const char* name, auto*& fn) { kernels = bind(l.handle, name, fn) && kernels; };
  want_k("cuCtxGetDevice", a.cuCtxGetDevice);
  want_k("cuModuleLoadData", a.cuModuleLoadData);
  want_k("cuModuleGetFunction", a.cuModuleGetFunction);
  want_k("cuLaunchKernel", a.cuLaunchKernel);
  want_k("cuIpcGetMemHandle", a.cuIpcGetMemHandle);
  want_k("cuIpcOpenMemHandle_v2", a.cuIpcOpenMemHandle);
  want_k("cuIpcCloseMemHandle", a.cuIpcCloseMemHandle);
  a.has_kernels = kernels && streams;
  // Since CUDA 11.7 (the v2 memory operations); without it a GPU collective
  // makes the caller's thread wait instead of the stream (stream_ops.cc).
  bind(l.handle, "cuStreamWaitValue32_v2", a.cuStreamWaitValue32);
  bind(l.handle, "cuStreamWriteValue32_v2", a.cuStreamWriteValue32);
  bind(l.handle, "cuStreamIsCapturing", a.cuStreamIsCapturing);
  if (CUresult r = a.cuInit(0); r != 0) {
    l.error = Error(Errc::kNotSupported, "cuInit failed: " + a.describe(r)).hint("is a GPU present and the driver loaded?");
    return l;
  }
  a.cuDriverGetVersion(&a.driver_version);
  a.cuDeviceGetCount(&a.device_count);
  return l;
}

const Loaded& loaded() {
  static std::once_flag once;
  static Loaded* l = nullptr;
  std::call_once(once, [] { l = new Loaded(load()); });  // never freed: callers may run at exit
  return *l;
}

}  // namespace

std::string CudaApi::describe(CUresult r) const {
  const char* s = nullptr;
  if (cuGetErrorString != nullptr) cuGetErrorString(r, &s);
  return "CUresult " + std::to_string(r) + (s != nullptr ? std::string(" (") + s + ")" : "");
}

Result<const CudaApi*> cuda() {
  const Loaded& l = loaded();
  if (l.error) return *l.error;
  return &l.api;
}

MemoryDomain pointer_domain(const void* p) noexcept {
  const Loaded& l = loaded();
  if (l.error || p == nullptr) return MemoryDomain::kHost;
  unsigned type = 0;
  CUresult r = l.api.cuPointerGetAttribute(&type, kPointerAttrMemoryType, reinterpret_cast<CUdeviceptr>(p));
  return r == 0 && type == kMemoryTypeDevice ? MemoryDomain::kCudaDevice : MemoryDomain::kHost;
}

Result<DmaBuf> export_dmabuf(const void* p, size_t length) {
  const CudaApi* a = GREX_TRY(cuda());
  if (a->cuMemGetHandleForAddressRange == nullptr)
    return Error(Errc::kNotSupported, "the CUDA driver has no cuMemGetHandleForAddressRange (needs CUDA 11.7 or newer)");
  const auto addr = reinterpret_cast<uint64_t>(p);
  const uint64_t base = addr & ~(kGpuPageBytes - 1);
  const uint64_t end = (addr + length + kGpuPageBytes - 1) & ~(kGpuPageBytes - 1);
  DmaBuf d;
  d.offset = addr - base;
  d.length = static_cast<size_t>(end - base);
  int fd = -1;
  if (CUresult r = a->cuMemGetHandleForAddressRange(&fd, base, d.length, kRangeHandleDmaBufFd, 0); r != 0)
    return Error(Errc::kNotSupported, "cuMemGetHandleForAddressRange(DMA_BUF_FD) failed: " + a->describe(r))
        .hint("the GPU, its driver or the kernel lacks dma-buf export (needs an open kernel module, Linux 5.12+)");
  d.fd = fd;
  return d;
}

// The transport's register_memory asks this about memory passed as host
// memory. Installed when libgrex loads (and, in a static link, whenever
// anything of lib/gpu is linked in: the verbs driver is).
[[maybe_unused]] const bool kDomainDetectorInstalled = [] {
  mem::set_domain_detector(&pointer_domain);
  return true;
}();

bool peermem_loaded() noexcept {
  struct stat st{};
  return ::stat("/sys/module/nvidia_peermem", &st) == 0;
}

}  // namespace grex::gpu
