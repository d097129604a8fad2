// SPDX-License-Identifier: Apache-2.0
// Which mechanism registers GPU memory with a NIC, in NCCL's order: dma-buf
// first (cuMemGetHandleForAddressRange -> ibv_reg_dmabuf_mr), nvidia_peermem
// second (ibv_reg_mr on the device pointer). A pure decision over what the
// host offers, so every branch is testable without a GPU.
#pragma once

#include <string>
#include <vector>

namespace grex::gpu {

enum class GpuRegPath { kDmaBuf, kPeermem };

/// What a driver found out about its host and device.
struct GpuRegFacts {
  bool cuda = false;          ///< cuda() succeeded
  std::string cuda_error;     ///< its message when it did not
  bool device_dmabuf = false; ///< the NIC's dma-buf probe (EOPNOTSUPP / EPROTONOSUPPORT = no)
  bool driver_dmabuf = false; ///< the CUDA driver exports dma-bufs (cuMemGetHandleForAddressRange exists)
  bool peermem = false;       ///< nvidia_peermem is loaded
};

/// The mechanisms to try, in order, and one line per mechanism saying why it
/// is or is not available ("dma-buf: not supported by rxe0 (ibv_reg_dmabuf_mr
/// probe: EOPNOTSUPP)"), for errors and grex-info.
struct GpuRegPlan {
  std::vector<GpuRegPath> order;
  std::vector<std::string> reasons;
  /// "CUDA driver: ...; dma-buf: ...; peermem: ..." in the order they were considered.
  std::string summary() const;
};

GpuRegPlan plan_gpu_registration(const GpuRegFacts& facts, const std::string& device);

/// The facts of this host (CUDA driver, its dma-buf export, nvidia_peermem)
/// with the NIC's own dma-buf probe result.
GpuRegFacts host_facts(bool device_dmabuf);

/// "dma-buf" or "peermem".
const char* path_name(GpuRegPath p) noexcept;

}  // namespace grex::gpu
