// SPDX-License-Identifier: Apache-2.0
// Probes that need no RDMA library: shm (POSIX shared memory, memfd), dpdk
// (hugepages, NICs bound for DPDK, kernel interfaces for af_xdp / af_packet)
// and CUDA (libgrex's probe, grex/probe.h: libcuda.so.1 is loaded at run time).
#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/net_tstamp.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <grex/probe.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "info.h"

namespace grex::info {
namespace {

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1u << 30));
  return buf;
}

std::string basename_of_link(const std::string& path) {
  char buf[512];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  const char* slash = std::strrchr(buf, '/');
  return slash != nullptr ? slash + 1 : buf;
}

bool built(const BuildInfo& b, const char* driver) {
  return std::find(b.drivers.begin(), b.drivers.end(), driver) != b.drivers.end();
}

// Hardware timestamping of a kernel interface (ethtool -T): "rx+tx", "rx", "tx" or "none".
std::string hw_timestamps(const std::string& ifname) {
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return "unknown";
  ethtool_ts_info info{};
  info.cmd = ETHTOOL_GET_TS_INFO;
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname.c_str());
  ifr.ifr_data = reinterpret_cast<char*>(&info);
  int rc = ::ioctl(fd, SIOCETHTOOL, &ifr);
  ::close(fd);
  if (rc != 0) return "unknown";
  bool rx = (info.so_timestamping & SOF_TIMESTAMPING_RX_HARDWARE) != 0;
  bool tx = (info.so_timestamping & SOF_TIMESTAMPING_TX_HARDWARE) != 0;
  return rx && tx ? "rx+tx" : rx ? "rx" : tx ? "tx" : "none";
}

}  // namespace

Section probe_shm() {
  Section s;
  s.name = "shm";
  struct statvfs st{};
  bool have_fs = ::statvfs("/dev/shm", &st) == 0;
  uint64_t total = have_fs ? st.f_blocks * st.f_frsize : 0, avail = have_fs ? st.f_bavail * st.f_frsize : 0;
  std::string name = "/grex-info-" + std::to_string(::getpid());
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  bool posix_shm = fd >= 0;
  if (posix_shm) {
    ::close(fd);
    ::shm_unlink(name.c_str());
  }
  int mfd = ::memfd_create("grex-info", MFD_CLOEXEC);
  bool memfd = mfd >= 0;
  if (memfd) ::close(mfd);
  std::string ptrace = read_text("/proc/sys/kernel/yama/ptrace_scope");
  s.usable = posix_shm;
  s.summary = posix_shm ? "usable between ranks of one host" : "POSIX shared memory (/dev/shm) is not writable here";
  s.lines.push_back("/dev/shm: " + (have_fs ? gib(avail) + " free of " + gib(total) : std::string("missing")));
  s.lines.push_back(std::string("memfd_create: ") + (memfd ? "yes (peers map buffers from Communicator::alloc)" : "no"));
  if (!ptrace.empty())
    s.lines.push_back("yama ptrace_scope: " + ptrace +
                      (ptrace == "0" || ptrace == "1" ? " (cross-process reads of malloc buffers allowed)"
                                                      : " (cross-process reads of malloc buffers refused)"));
  s.json = {{"usable", s.usable}, {"dev_shm_total_bytes", total}, {"dev_shm_free_bytes", avail},
            {"memfd", memfd}, {"ptrace_scope", ptrace}};
  return s;
}

Section probe_dpdk() {
  Section s;
  s.name = "dpdk";
  s.networking = true;
  const BuildInfo build = build_info();
  const bool is_built = built(build, "dpdk");
  // Hugepages per size.
  Json huge = Json::array();
  uint64_t free_bytes = 0;
  for (const auto& dir : list_dir("/sys/kernel/mm/hugepages")) {
    uint64_t kb = std::strtoull(dir.c_str() + std::strlen("hugepages-"), nullptr, 10);
    uint64_t total = std::strtoull(read_text("/sys/kernel/mm/hugepages/" + dir + "/nr_hugepages").c_str(), nullptr, 10);
    uint64_t fr = std::strtoull(read_text("/sys/kernel/mm/hugepages/" + dir + "/free_hugepages").c_str(), nullptr, 10);
    free_bytes += fr * kb * 1024;
    huge.push_back(Json{{"page_kb", kb}, {"total", total}, {"free", fr}});
    s.lines.push_back("hugepages " + std::to_string(kb) + " kB: " + std::to_string(total) + " reserved, " +
                      std::to_string(fr) + " free");
  }
  if (free_bytes == 0) s.lines.push_back("(no free hugepages: grex runs EAL with --no-huge, fine for virtual devices)");
  // PCI network controllers and their kernel driver.
  Json pci = Json::array();
  int ready = 0;
  for (const auto& addr : list_dir("/sys/bus/pci/devices")) {
    const std::string base = "/sys/bus/pci/devices/" + addr;
    if (read_text(base + "/class").rfind("0x02", 0) != 0) continue;  // 0x02xxxx: network controller
    std::string drv = basename_of_link(base + "/driver");
    bool bound = drv == "vfio-pci" || drv == "uio_pci_generic" || drv == "igb_uio";
    bool bifurcated = drv == "mlx5_core";  // DPDK's mlx5 PMD drives it next to the kernel
    ready += bound || bifurcated ? 1 : 0;
    std::string ids = read_text(base + "/vendor") + ":" + read_text(base + "/device");
    s.lines.push_back("PCI " + addr + " [" + ids + "] driver " + (drv.empty() ? "none" : drv) +
                      (bound ? ": ready for DPDK (GREX_DPDK_MODE=port GREX_DPDK_PORT=" + addr + ")"
                             : bifurcated ? ": usable by DPDK's mlx5 PMD as it is" : ": kernel-owned"));
    pci.push_back(Json{{"address", addr}, {"ids", ids}, {"driver", drv}, {"dpdk_ready", bound || bifurcated}});
  }
  // Kernel interfaces: af_xdp and af_packet vdevs attach to these.
  Json nets = Json::array();
  int up = 0;
  for (const auto& ifname : list_dir("/sys/class/net")) {
    if (ifname == "lo") continue;
    const std::string base = "/sys/class/net/" + ifname;
    std::string oper = read_text(base + "/operstate"), mtu = read_text(base + "/mtu"), speed = read_text(base + "/speed");
    std::string drv = basename_of_link(base + "/device/driver");
    if (drv.empty()) drv = "virtual";
    long long mbps = speed.empty() ? -1 : std::atoll(speed.c_str());
    std::string ts = hw_timestamps(ifname);
    bool is_up = oper == "up" || oper == "unknown";
    up += is_up ? 1 : 0;
    s.lines.push_back("netdev " + ifname + ": " + oper + ", MTU " + mtu + ", " +
                      (mbps > 0 ? std::to_string(mbps) + " Mb/s" : std::string("speed unknown")) + ", driver " + drv +
                      ", hw timestamps " + ts);
    nets.push_back(Json{{"name", ifname}, {"operstate", oper}, {"mtu", static_cast<int64_t>(std::atoll(mtu.c_str()))},
                                {"speed_mbps", static_cast<int64_t>(mbps)}, {"driver", drv}, {"hw_timestamps", ts}});
  }
  s.usable = is_built && (ready > 0 || up > 0);
  if (!is_built) {
    s.summary = "not built into this libgrex (install libdpdk-dev and rebuild)";
  } else {
    s.summary = "DPDK " + build.dpdk_version + ": " + std::to_string(ready) + " PCI port(s) ready, " +
                std::to_string(up) + " kernel interface(s) up for af_xdp / af_packet; memif between ranks of one host";
  }
  s.json = {{"usable", s.usable}, {"built", is_built}, {"version", build.dpdk_version},
            {"hugepages", huge}, {"pci_nics", pci}, {"netdevs", nets}};
  return s;
}

Section probe_cuda() {
  Section s;
  s.name = "cuda";
  const CudaReport r = probe_cuda_devices();
  const std::string peermem = r.nvidia_peermem ? "loaded" : "not loaded";
  const std::string kernels = r.kernel_image_bytes > 0
                                  ? "embedded (sm_80, sm_90, compute_90; " + std::to_string(r.kernel_image_bytes / 1024) + " KiB)"
                                  : "not built (libgrex was built without nvcc)";
  if (!r.available) {
    s.summary = r.error + ": no GPU buffers";
    s.lines.push_back("GPU kernels in libgrex: " + kernels);
    s.json = {{"usable", false}, {"error", r.error}, {"nvidia_peermem", peermem},
              {"kernel_image_bytes", r.kernel_image_bytes}};
    return s;
  }
  Json devs = Json::array();
  for (const CudaDevice& d : r.devices) {
    s.lines.push_back("GPU " + std::to_string(d.index) + ": " + d.name + ", " + gib(d.memory_bytes) + ", PCI " + d.pci +
                      ", dma-buf " + (d.dma_buf ? "yes" : "no") + ", GPUDirect RDMA " + (d.gpudirect_rdma ? "yes" : "no"));
    devs.push_back(Json{{"index", d.index}, {"name", d.name}, {"memory_bytes", d.memory_bytes}, {"pci", d.pci},
                        {"dma_buf", d.dma_buf}, {"gpudirect_rdma", d.gpudirect_rdma}});
  }
  s.lines.push_back("nvidia_peermem: " + peermem);
  s.lines.push_back("GPU kernels in libgrex: " + kernels);
  // What the stream-ordered collectives do with GPU buffers here (docs/gpudirect.md).
  std::string path = !r.stream_memops ? "staged through pinned host memory; the caller waits (no stream memory operations)"
                     : r.kernel_image_bytes > 0 && r.ipc
                         ? "allreduce GPU to GPU between ranks of one host (shm, CUDA IPC); the rest staged through "
                           "pinned host memory, stream-ordered"
                         : "staged through pinned host memory, stream-ordered";
  s.lines.push_back("GPU buffers in collectives: " + path);
  s.usable = r.device_count > 0;
  s.summary = "CUDA driver " + std::to_string(r.driver_version / 1000) + "." +
              std::to_string(r.driver_version % 1000 / 10) + ", " + std::to_string(r.device_count) + " device(s)";
  s.json = {{"usable", s.usable}, {"driver_version", r.driver_version}, {"devices", devs}, {"nvidia_peermem", peermem},
            {"kernel_image_bytes", r.kernel_image_bytes}, {"stream_memops", r.stream_memops}, {"gpu_ipc", r.ipc},
            {"gpu_collectives", path}};
  return s;
}

}  // namespace grex::info
