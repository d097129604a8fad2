// SPDX-License-Identifier: Apache-2.0
#include "gpu/gpu_registration.h"

#include "gpu/cuda_api.h"

namespace grex::gpu {

GpuRegPlan plan_gpu_registration(const GpuRegFacts& f, const std::string& device) {
  GpuRegPlan p;
  p.reasons.push_back(f.cuda ? "CUDA driver: loaded" : "CUDA driver: " + f.cuda_error);
  if (!f.device_dmabuf)
    p.reasons.push_back("dma-buf: not supported by " + device + " (ibv_reg_dmabuf_mr probe: EOPNOTSUPP)");
  else if (!f.cuda)
    p.reasons.push_back("dma-buf: " + device + " supports it, but there is no CUDA driver to export GPU memory");
  else if (!f.driver_dmabuf)
    p.reasons.push_back("dma-buf: the CUDA driver cannot export dma-bufs (cuMemGetHandleForAddressRange needs 11.7+)");
  else
    p.reasons.push_back("dma-buf: available");
  if (f.cuda && f.device_dmabuf && f.driver_dmabuf) p.order.push_back(GpuRegPath::kDmaBuf);
  if (!f.peermem)
    p.reasons.push_back("peermem: nvidia_peermem is not loaded");
  else if (!f.cuda)
    p.reasons.push_back("peermem: nvidia_peermem is loaded, but there is no CUDA driver");
  else
    p.reasons.push_back("peermem: available");
  if (f.cuda && f.peermem) p.order.push_back(GpuRegPath::kPeermem);
  return p;
}

std::string GpuRegPlan::summary() const {
  std::string s;
  for (const auto& r : reasons) s += (s.empty() ? "" : "; ") + r;
  return s;
}

GpuRegFacts host_facts(bool device_dmabuf) {
  GpuRegFacts f;
  auto api = cuda();
  f.cuda = api.ok();
  if (!api) f.cuda_error = api.error().cause();
  f.device_dmabuf = device_dmabuf;
  f.driver_dmabuf = api.ok() && (*api)->cuMemGetHandleForAddressRange != nullptr;
  f.peermem = peermem_loaded();
  return f;
}

const char* path_name(GpuRegPath p) noexcept { return p == GpuRegPath::kDmaBuf ? "dma-buf" : "peermem"; }

}  // namespace grex::gpu
