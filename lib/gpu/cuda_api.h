// SPDX-License-Identifier: Apache-2.0
// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1"), so
// libgrex builds without the CUDA toolkit and runs (reporting "no CUDA") on
// hosts without a GPU. Only the calls grex uses are resolved; the types are
// the driver ABI's (cuda.h), spelled here so no CUDA header is needed.
#pragma once

#include <grex/memory.h>
#include <grex/result.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace grex::gpu {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
/// CUipcMemHandle: 64 opaque bytes, passed by value.
struct CUipcMemHandle {
  char reserved[64];
};

/// cuda.h enum values grex passes (stable parts of the driver ABI).
inline constexpr int kPointerAttrMemoryType = 2;        ///< CU_POINTER_ATTRIBUTE_MEMORY_TYPE
inline constexpr unsigned kMemoryTypeDevice = 2;        ///< CU_MEMORYTYPE_DEVICE
inline constexpr int kRangeHandleDmaBufFd = 1;          ///< CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
inline constexpr int kAttrPciBusId = 33;                ///< CU_DEVICE_ATTRIBUTE_PCI_BUS_ID
inline constexpr int kAttrPciDeviceId = 34;             ///< CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID
inline constexpr int kAttrPciDomainId = 50;             ///< CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID
inline constexpr int kAttrGpuDirectRdmaSupported = 116; ///< CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
inline constexpr int kAttrDmaBufSupported = 124;        ///< CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
inline constexpr int kPointerAttrContext = 1;           ///< CU_POINTER_ATTRIBUTE_CONTEXT
inline constexpr unsigned kHostAllocPortable = 0x01;    ///< CU_MEMHOSTALLOC_PORTABLE
inline constexpr unsigned kHostAllocDeviceMap = 0x02;   ///< CU_MEMHOSTALLOC_DEVICEMAP
inline constexpr unsigned kHostRegisterPortable = 0x01; ///< CU_MEMHOSTREGISTER_PORTABLE
inline constexpr unsigned kHostRegisterDeviceMap = 0x02;///< CU_MEMHOSTREGISTER_DEVICEMAP
inline constexpr unsigned kEventDisableTiming = 0x2;    ///< CU_EVENT_DISABLE_TIMING
inline constexpr unsigned kStreamWaitValueGeq = 0x0;    ///< CU_STREAM_WAIT_VALUE_GEQ: (int32_t)(*addr - value) >= 0
inline constexpr CUresult kErrorNotReady = 600;
inline constexpr int kAttrMultiprocessorCount = 16;      ///< CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
inline constexpr unsigned kIpcLazyEnablePeerAccess = 1;  ///< CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS         ///< CUDA_ERROR_NOT_READY

/// The resolved entry points. Every pointer is set once cuda() succeeded.
struct CudaApi {
  int driver_version = 0;  ///< cuDriverGetVersion: 12040 for 12.4
  int device_count = 0;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice) = nullptr;  // cuDeviceTotalMem_v2
  CUresult (*cuPointerGetAttribute)(void*, int, CUdeviceptr) = nullptr;
  CUresult (*cuMemGetHandleForAddressRange)(void*, CUdeviceptr, size_t, int, unsigned long long) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;

  // Streams, events, copies and pinned memory: GPU buffers in the collectives
  // (stream_ops.h). Resolved with the rest; has_streams says whether all were.
  bool has_streams = false;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;  // cuEventDestroy_v2
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventQuery)(CUevent) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuStreamQuery)(CUstream) = nullptr;
  /// cuStreamIsCapturing (CUDA 10+); null where missing. Status 0: not capturing.
  CUresult (*cuStreamIsCapturing)(CUstream, int*) = nullptr;
  CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*cuMemFreeHost)(void*) = nullptr;
  CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned) = nullptr;  // _v2
  CUresult (*cuMemHostRegister)(void*, size_t, unsigned) = nullptr;                 // _v2
  CUresult (*cuMemHostUnregister)(void*) = nullptr;
  /// cuStreamWaitValue32_v2; null on drivers without stream memory operations.
  CUresult (*cuStreamWaitValue32)(CUstream, CUdeviceptr, uint32_t, unsigned) = nullptr;
  /// cuStreamWriteValue32_v2 (flags 0: a system-wide fence before the write);
  /// null where missing (the GPU-to-GPU barriers then meet on the host).
  CUresult (*cuStreamWriteValue32)(CUstream, CUdeviceptr, uint32_t, unsigned) = nullptr;
  // For tests and tools that need device memory of their own.
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;  // cuMemAlloc_v2
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;            // cuMemFree_v2
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream) = nullptr;
  CUresult (*cuStreamCreate)(CUstream*, unsigned) = nullptr;

  // Kernels (kernels.h) and CUDA IPC (the shm driver's GPU path); has_kernels
  // says whether all were resolved.
  bool has_kernels = false;
  CUresult (*cuCtxGetDevice)(CUdevice*) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**) = nullptr;
  CUresult (*cuIpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr) = nullptr;
  CUresult (*cuIpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned) = nullptr;  // _v2
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr) = nullptr;

  /// "CUDA_ERROR_...: text" for a result code.
  std::string describe(CUresult r) const;
};

/// Loads libcuda.so.1 and calls cuInit(0), once per process (thread-safe).
/// Errors, repeated on every call: kNotFound "no CUDA driver (libcuda.so.1: ...)"
/// where the library is missing; kNotSupported naming the call where cuInit or
/// a needed symbol fails (a driver too old, no device).
Result<const CudaApi*> cuda();

/// kCudaDevice when CUDA reports `p` as device memory; kHost otherwise,
/// including always on hosts without CUDA.
MemoryDomain pointer_domain(const void* p) noexcept;

/// A dma-buf for device memory: the fd exported by cuMemGetHandleForAddressRange
/// for the page-aligned range around [p, p+length), and p's offset inside it.
/// The caller closes fd.
struct DmaBuf {
  int fd = -1;
  uint64_t offset = 0;
  size_t length = 0;  ///< of the exported, page-aligned range
};
Result<DmaBuf> export_dmabuf(const void* p, size_t length);

/// True when the nvidia_peermem kernel module is loaded (ibv_reg_mr then
/// accepts device pointers).
bool peermem_loaded() noexcept;

}  // namespace grex::gpu
