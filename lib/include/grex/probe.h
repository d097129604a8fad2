// SPDX-License-Identifier: Apache-2.0
/// @file probe.h
/// What this libgrex was built with, and what the devices of this host offer
/// it: RDMA devices and their ports, CUDA devices, and how GPU memory would
/// reach each NIC (GPUDirect through dma-buf or nvidia_peermem). For tools
/// such as grex-info. No call here opens a grex Device or needs a job; each
/// may take a few milliseconds (it opens the devices it describes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace grex {

/// The library's version and the parts built into it.
struct BuildInfo {
  std::string version;               ///< libgrex's, e.g. "0.1.0"
  std::vector<std::string> drivers;  ///< drivers built in, as Device::available_drivers()
  std::string dpdk_version;          ///< DPDK it was compiled against; "" without the dpdk driver
  std::string ibverbs_version;       ///< libibverbs it was compiled against; "" without verbs
};

/// What this libgrex is and holds.
BuildInfo build_info();

/// The answer of a capability probe.
enum class Support : uint8_t {
  kNo = 0,
  kYes = 1,
  kUnknown = 2,  ///< the probe could not run; the accompanying note says why
};

/// How GPU memory would be registered with one NIC, as the verbs driver
/// decides it (dma-buf first, then nvidia_peermem, as NCCL does).
struct GpuDirectSupport {
  Support dma_buf = Support::kUnknown;  ///< the NIC takes dma-buf registrations (probe call)
  std::string dma_buf_note;             ///< why dma_buf is kUnknown ("ibv_alloc_pd failed")
  bool nvidia_peermem = false;          ///< the nvidia_peermem module is loaded
  /// The mechanisms the driver would try, in order: "dma-buf", "peermem";
  /// empty when GPU memory cannot reach this NIC.
  std::vector<std::string> order;
  /// Why each mechanism is or is not available: "CUDA driver: ...; dma-buf: ...; peermem: ...".
  std::string summary;
};

/// One GID table entry that is set.
struct RdmaGid {
  int index = 0;
  std::string gid;     ///< "fe80:0000:...", or "::ffff:10.0.0.1" for IPv4-mapped ones
  std::string type;    ///< "RoCE v2", "RoCE v1" or "IB"
  std::string netdev;  ///< the network interface behind it ("" for InfiniBand)
};

/// One port of an RDMA device.
struct RdmaPort {
  int port = 0;                ///< 1-based
  std::string state;           ///< "ACTIVE", "DOWN", "INIT", "ARMED" or "other"
  bool ethernet = false;       ///< RoCE; false: InfiniBand
  int active_mtu = 0;          ///< bytes
  int max_mtu = 0;             ///< bytes
  double speed_gbps = 0;       ///< lanes x per-lane rate; 0 when unknown
  std::vector<RdmaGid> gids;
};

/// One RDMA device. When `error` is set the device could not be opened and
/// only `name` is filled.
struct RdmaDevice {
  std::string name;                  ///< "mlx5_0", "rxe0"
  std::string error;                 ///< why it could not be opened ("Permission denied")
  std::string firmware;
  int max_qp = 0;                    ///< queue pairs
  int max_qp_wr = 0;                 ///< work requests per queue pair
  bool completion_timestamps = false;
  uint64_t hca_core_clock_khz = 0;   ///< the timestamp clock; 0 when unknown
  GpuDirectSupport gpudirect;
  std::vector<RdmaPort> ports;
};

/// The RDMA devices of this host, as the verbs driver sees them.
struct RdmaReport {
  bool built = false;                ///< the verbs driver is in this libgrex
  std::vector<RdmaDevice> devices;   ///< empty: no RDMA device (or not built)
};

/// Lists the RDMA devices, their ports and GIDs, and their GPUDirect paths.
RdmaReport probe_rdma_devices();

/// The host this process counts as, as Communicator::create groups ranks
/// (one host: shm between them): GREX_HOST_ID where set, else the machine
/// (hostname, boot id) and this process's network namespace.
std::string host_identity();
/// The network backend GREX_NET=auto takes on this host: "verbs" where an
/// RDMA port is ACTIVE, else "dpdk" (a job takes verbs only where every rank
/// would).
std::string default_network_backend();

/// One CUDA device.
struct CudaDevice {
  int index = 0;
  std::string name;
  uint64_t memory_bytes = 0;
  std::string pci;              ///< "0000:3b:00.0"
  bool dma_buf = false;         ///< CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
  bool gpudirect_rdma = false;  ///< CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
};

/// The CUDA driver and devices of this host (the driver is loaded at run
/// time; libgrex needs no CUDA to build).
struct CudaReport {
  bool available = false;        ///< the CUDA driver loaded and initialised
  std::string error;             ///< why not, when !available
  int driver_version = 0;        ///< 12040 for 12.4
  int device_count = 0;          ///< as the driver counts them
  std::vector<CudaDevice> devices;
  bool nvidia_peermem = false;   ///< the nvidia_peermem module is loaded
  size_t kernel_image_bytes = 0; ///< libgrex's embedded GPU kernels (0: built without nvcc)
  bool stream_memops = false;    ///< the driver has cuStreamWaitValue32 (streams wait for grex's host work)
  bool ipc = false;              ///< the driver has the CUDA IPC and kernel calls (GPU to GPU on one host)
};

/// Loads the CUDA driver (once per process) and lists its devices.
CudaReport probe_cuda_devices();

}  // namespace grex
