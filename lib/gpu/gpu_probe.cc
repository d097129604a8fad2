// SPDX-License-Identifier: Apache-2.0
// probe_cuda_devices (grex/probe.h): the CUDA driver and each device's
// memory, PCI address and GPUDirect attributes.
#include <grex/probe.h>

#include <cstdio>

#include "gpu/cuda_api.h"
#include "gpu/kernels.h"

namespace grex {

CudaReport probe_cuda_devices() {
  CudaReport r;
  r.nvidia_peermem = gpu::peermem_loaded();
  r.kernel_image_bytes = gpu::kKernelsFatbinSize;
  auto api = gpu::cuda();
  if (!api) {
    r.error = api.error().cause();
    return r;
  }
  const gpu::CudaApi& a = **api;
  r.available = true;
  r.driver_version = a.driver_version;
  r.stream_memops = a.has_streams && a.cuStreamWaitValue32 != nullptr;
  r.ipc = a.has_kernels;
  r.device_count = a.device_count;
  for (int i = 0; i < a.device_count; ++i) {
    gpu::CUdevice dev = 0;
    if (a.cuDeviceGet(&dev, i) != 0) continue;
    char name[256] = {};
    a.cuDeviceGetName(name, sizeof name, dev);
    size_t bytes = 0;
    a.cuDeviceTotalMem(&bytes, dev);
    auto attr = [&](int which) {
      int v = 0;
      return a.cuDeviceGetAttribute(&v, which, dev) == 0 ? v : -1;
    };
    char bus[32];
    std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.0", attr(gpu::kAttrPciDomainId), attr(gpu::kAttrPciBusId),
                  attr(gpu::kAttrPciDeviceId));
    r.devices.push_back(CudaDevice{.index = i,
                                   .name = name,
                                   .memory_bytes = bytes,
                                   .pci = bus,
                                   .dma_buf = attr(gpu::kAttrDmaBufSupported) == 1,
                                   .gpudirect_rdma = attr(gpu::kAttrGpuDirectRdmaSupported) == 1});
  }
  return r;
}

}  // namespace grex
