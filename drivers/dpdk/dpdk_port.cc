// SPDX-License-Identifier: Apache-2.0
// Port setup: vdev hot-plug, mempool sizing per PMD, queue and offload configuration, teardown.
#include "drivers/dpdk/dpdk_port.h"

#include "core/log.h"
#include "drivers/dpdk/dpdk_eal.h"
#include "drivers/dpdk/dpdk_frame.h"

#include <rte_alarm.h>
#include <rte_errno.h>
#include <rte_interrupts.h>
#include <rte_ether.h>
#include <rte_lcore.h>
#include <rte_mempool.h>

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <thread>

namespace grex::dpdk {
namespace {

constexpr uint16_t kMinMtu = 68;
constexpr uint32_t kMaxPoolCache = 256;
/// Ethernet header + two VLAN tags: the most a frame adds to the MTU (no CRC in mbufs).
constexpr uint32_t kFrameOverheadBytes = RTE_ETHER_HDR_LEN + 2 * RTE_VLAN_HLEN;
static_assert(kMaxMtu == UINT16_MAX / 128 * 128 - RTE_PKTMBUF_HEADROOM - kFrameOverheadBytes);
/// memif's default buffer size when devargs have no bsize.
constexpr uint32_t kMemifDefaultBsizeBytes = 2048;
/// af_packet's default framesz; the frame data area is framesz minus this overhead.
constexpr uint32_t kAfPacketDefaultFrameszBytes = 2048;
constexpr uint32_t kAfPacketFrameOverheadBytes = 32;  // TPACKET2_HDRLEN - sizeof(sockaddr_ll)
/// af_xdp (22.11, mempool as UMEM): an mbuf must fit a 4 KiB UMEM chunk, so the
/// data room is at most 3840, and frames longer than room - 384 are dropped.
constexpr uint32_t kAfXdpMaxDataRoomBytes = 3840;
constexpr uint32_t kAfXdpRoomOverheadBytes = 384;

std::atomic<uint32_t> g_pool_seq{0};

/// Value of `key=` in "name,k1=v1,k2=v2" or "" when absent.
std::string devarg(const std::string& devargs, const std::string& key) {
  size_t pos = devargs.find(',');
  while (pos != std::string::npos) {
    const size_t start = pos + 1;
    const size_t end = devargs.find(',', start);
    const std::string kv = devargs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (kv.size() > key.size() && kv.compare(0, key.size(), key) == 0 && kv[key.size()] == '=')
      return kv.substr(key.size() + 1);
    pos = end;
  }
  return "";
}

uint32_t devarg_u32(const std::string& devargs, const std::string& key, uint32_t fallback) {
  const std::string v = devarg(devargs, key);
  if (v.empty()) return fallback;
  return static_cast<uint32_t>(std::strtoul(v.c_str(), nullptr, 0));
}

/// MTU of kernel interface `iface` in this network namespace, or -1.
int kernel_mtu(const std::string& iface) {
  if (iface.empty() || iface.size() >= IFNAMSIZ) return -1;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  ifreq req{};
  std::memcpy(req.ifr_name, iface.c_str(), iface.size());
  const int rc = ioctl(fd, SIOCGIFMTU, &req);
  close(fd);
  return rc == 0 ? req.ifr_mtu : -1;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

/// Speed of kernel interface `iface` in Mbit/s when it is a physical device
/// (sysfs in this network namespace), else 0.
uint32_t kernel_speed_mbps(const std::string& iface) {
  if (iface.empty() || iface.find('/') != std::string::npos) return 0;
  const std::string dir = "/sys/class/net/" + iface;
  if (access((dir + "/device").c_str(), F_OK) != 0) return 0;  // virtual: no rate of its own
  FILE* f = std::fopen((dir + "/speed").c_str(), "r");
  if (f == nullptr) return 0;
  long v = 0;
  const bool ok = std::fscanf(f, "%ld", &v) == 1;
  std::fclose(f);
  return ok && v > 0 ? static_cast<uint32_t>(v) : 0;
}

uint32_t round_up(uint32_t v, uint32_t to) { return (v + to - 1) / to * to; }

/// Checks the vdev's buffer settings against the MTU and picks the mbuf data
/// room (headroom included) and the MTU to request.
Result<void> size_buffers(const PortOptions& opts, const std::string& name, uint16_t* mtu, uint32_t* room) {
  *mtu = opts.mtu;
  uint32_t frame = uint32_t(opts.mtu) + kFrameOverheadBytes;
  uint32_t need = std::max<uint32_t>(RTE_MBUF_DEFAULT_BUF_SIZE, round_up(frame + RTE_PKTMBUF_HEADROOM, 128));
  if (starts_with(name, "net_memif")) {
    const uint32_t bsize = devarg_u32(opts.devargs, "bsize", kMemifDefaultBsizeBytes);
    if (bsize < frame) {
      return Error(Errc::kInvalidArgument, "memif bsize " + std::to_string(bsize) + " is smaller than a " +
                                               std::to_string(frame) + "-byte frame (MTU " +
                                               std::to_string(opts.mtu) + ")")
          .device(name)
          .hint("add bsize=" + std::to_string(round_up(frame, 1024)) +
                " (or more) to the devargs of both peers: memif corrupts frames that span buffers");
    }
  } else if (starts_with(name, "net_af_packet")) {
    const uint32_t framesz = devarg_u32(opts.devargs, "framesz", kAfPacketDefaultFrameszBytes);
    if (framesz < frame + kAfPacketFrameOverheadBytes) {
      return Error(Errc::kInvalidArgument, "af_packet framesz " + std::to_string(framesz) +
                                               " drops frames above " +
                                               std::to_string(framesz - kAfPacketFrameOverheadBytes) +
                                               " bytes, MTU " + std::to_string(opts.mtu) + " needs " +
                                               std::to_string(frame))
          .device(name)
          .hint("for MTU 9000 use framesz=10240,blocksz=20480,framecnt=512; for MTU 64000, "
                "framesz=64512,blocksz=258048,framecnt=256");
    }
    // The PMD (22.11) finds frame i at i x framesz in the ring, while the
    // kernel starts every block afresh: frames past the first block's are
    // misplaced unless framesz divides blocksz, and sends then stall for
    // good waiting for a ring slot the kernel never frees (seen at
    // framesz=17408,blocksz=20480).
    const uint32_t blocksz = devarg_u32(opts.devargs, "blocksz", static_cast<uint32_t>(getpagesize()));
    if (framesz == 0 || blocksz % framesz != 0) {
      return Error(Errc::kInvalidArgument, "af_packet blocksz " + std::to_string(blocksz) +
                                               " is not a multiple of framesz " + std::to_string(framesz))
          .device(name)
          .hint("the PMD places frames as if each block held whole frames: pick blocksz = k x framesz (e.g. "
                "framesz=64512,blocksz=258048 for MTU 64000)");
    }
    // The PMD refuses an RX pool whose mbufs cannot hold a whole frame slot.
    need = std::max(need, round_up(framesz - kAfPacketFrameOverheadBytes + RTE_PKTMBUF_HEADROOM, 128));
  } else if (starts_with(name, "net_af_xdp")) {
    need = std::min(round_up(frame + kAfXdpRoomOverheadBytes, 128), kAfXdpMaxDataRoomBytes);
    need = std::max<uint32_t>(need, RTE_MBUF_DEFAULT_BUF_SIZE);
    const uint32_t max_frame = need - kAfXdpRoomOverheadBytes;
    if (frame > max_frame) {
      *mtu = static_cast<uint16_t>(max_frame - kFrameOverheadBytes);
      GREX_WARN("dpdk", "%s: af_xdp carries frames of at most %u bytes; MTU %u lowered to %u", name.c_str(),
                max_frame, opts.mtu, *mtu);
    }
  }
  if (opts.data_room != 0) {
    if (opts.data_room < RTE_PKTMBUF_HEADROOM + RTE_ETHER_MIN_LEN)
      return Error(Errc::kInvalidArgument, "data_room " + std::to_string(opts.data_room) + " is too small")
          .device(name)
          .hint("use 0 to derive it from the MTU");
    need = opts.data_room;
  }
  if (need > UINT16_MAX)
    return Error(Errc::kInvalidArgument, "mbuf data room " + std::to_string(need) + " exceeds 65535").device(name);
  *room = need;
  return ok();
}

Error eth_error(const std::string& name, const char* call, int rc, const char* hint) {
  return Error(Errc::kSystem, std::string(call) + " failed: " + rte_strerror(rc < 0 ? -rc : rc))
      .device(name)
      .hint(hint);
}

}  // namespace

Result<std::unique_ptr<Port>> Port::open(const PortOptions& opts) {
  std::unique_ptr<Port> port(new Port());
  auto r = port->setup(opts);
  if (!r.ok()) {
    port->stop();  // undoes whatever setup got to
    return std::move(r).error();
  }
  return port;
}

Port::~Port() { stop(); }

Result<void> Port::setup(const PortOptions& opts) {
  name_ = opts.devargs.substr(0, opts.devargs.find(','));
  if (starts_with(name_, "net_af_packet") || starts_with(name_, "net_af_xdp")) iface_ = devarg(opts.devargs, "iface");
  if (opts.mtu < kMinMtu || opts.mtu > kMaxMtu)
    return Error(Errc::kInvalidArgument, "MTU " + std::to_string(opts.mtu) + " out of range " + std::to_string(kMinMtu) + ".." +
                                                 std::to_string(kMaxMtu))
        .device(name_);
  if (opts.mbufs < 64)
    return Error(Errc::kInvalidArgument, "mbufs " + std::to_string(opts.mbufs) + " < 64").device(name_);
  uint16_t mtu = 0;
  uint32_t room = 0;
  GREX_TRY(size_buffers(opts, name_, &mtu, &room));

  id_ = GREX_TRY(probe_vdev(opts.devargs));
  probed_ = true;

  int socket = rte_eth_dev_socket_id(id_);
  if (socket < 0) socket = static_cast<int>(rte_socket_id());
  const std::string pool_name = "grex_p" + std::to_string(id_) + "_" + std::to_string(g_pool_seq++);
  const uint32_t cache = std::min(kMaxPoolCache, opts.mbufs / 2);
  pool_ = rte_pktmbuf_pool_create(pool_name.c_str(), opts.mbufs, cache, 0, static_cast<uint16_t>(room), socket);
  if (pool_ == nullptr) {
    return Error(Errc::kNoMemory, "mempool " + pool_name + " (" + std::to_string(opts.mbufs) + " mbufs of " +
                                      std::to_string(room) + " B) failed: " + rte_strerror(rte_errno))
        .device(name_)
        .hint("lower PortOptions::mbufs or the MTU, or give EAL more memory (EalOptions::memory_mb)");
  }
  mbuf_bytes_ = static_cast<uint16_t>(room - RTE_PKTMBUF_HEADROOM);

  PortOptions adjusted = opts;
  adjusted.mtu = mtu;
  GREX_TRY(configure(adjusted));

  int rc = rte_eth_dev_start(id_);
  if (rc < 0) return eth_error(name_, "rte_eth_dev_start", rc, "GREX_LOG_LEVEL=debug shows the PMD's log");
  started_ = true;
  rc = rte_eth_promiscuous_enable(id_);
  if (rc < 0 && rc != -ENOTSUP) GREX_DEBUG("dpdk", "%s: promiscuous mode: %s", name_.c_str(), rte_strerror(-rc));
  const bool promiscuous = rc == 0;

  rte_ether_addr addr{};
  if (rte_eth_macaddr_get(id_, &addr) == 0) std::copy(addr.addr_bytes, addr.addr_bytes + 6, mac_.begin());
  if (opts.mac != PortOptions::Mac::kPort) {
    // Frames to a MAC the port does not own arrive only in promiscuous mode.
    if (promiscuous)
      mac_ = opts.mac == PortOptions::Mac::kPrivate ? frame::private_mac(mac_) : opts.given_mac;
    else
      GREX_WARN("dpdk", "%s: no promiscuous mode, so grex keeps the port's own MAC", name_.c_str());
  }
  std::string tx_offloads;
  if (offloads_.tx_ip_cksum) tx_offloads += " ipv4-cksum";
  if (offloads_.tx_udp_cksum) tx_offloads += " udp-cksum";
  if (offloads_.tx_multi_seg) tx_offloads += " multi-seg";
  GREX_INFO("dpdk", "%s: port %u up, mtu %u, mbuf room %u, tx offloads:%s, mac %02x:%02x:%02x:%02x:%02x:%02x",
            name_.c_str(), id_, mtu_, room, tx_offloads.empty() ? " none" : tx_offloads.c_str(), mac_[0], mac_[1],
            mac_[2], mac_[3], mac_[4], mac_[5]);
  return ok();
}

Result<void> Port::configure(const PortOptions& opts) {
  rte_eth_dev_info info{};
  int rc = rte_eth_dev_info_get(id_, &info);
  if (rc != 0) return eth_error(name_, "rte_eth_dev_info_get", rc, "the port vanished; was it removed?");

  const uint64_t tx = info.tx_offload_capa;
  const uint64_t rx = info.rx_offload_capa;
  offloads_.tx_ip_cksum = (tx & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) != 0;
  offloads_.tx_udp_cksum = (tx & RTE_ETH_TX_OFFLOAD_UDP_CKSUM) != 0;
  offloads_.tx_multi_seg = (tx & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0;
  offloads_.tx_extbuf = offloads_.tx_multi_seg && devarg(opts.devargs, "zero-copy") != "yes";
  offloads_.rx_ip_cksum = (rx & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM) != 0;
  offloads_.rx_udp_cksum = (rx & RTE_ETH_RX_OFFLOAD_UDP_CKSUM) != 0;

  rte_eth_conf conf{};
  conf.txmode.offloads = tx & (RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM |
                               RTE_ETH_TX_OFFLOAD_MULTI_SEGS);
  conf.rxmode.offloads = rx & (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
  rc = rte_eth_dev_configure(id_, 1, 1, &conf);
  if (rc < 0) return eth_error(name_, "rte_eth_dev_configure(1 rx, 1 tx)", rc, "the PMD rejected the offloads");

  apply_mtu(info, opts);

  uint16_t rxd = opts.rx_desc;
  uint16_t txd = opts.tx_desc;
  rc = rte_eth_dev_adjust_nb_rx_tx_desc(id_, &rxd, &txd);
  if (rc < 0) return eth_error(name_, "rte_eth_dev_adjust_nb_rx_tx_desc", rc, "check rx_desc/tx_desc");

  const int socket = rte_eth_dev_socket_id(id_) < 0 ? static_cast<int>(rte_socket_id()) : rte_eth_dev_socket_id(id_);
  rte_eth_rxconf rxconf = info.default_rxconf;
  rxconf.offloads = conf.rxmode.offloads;
  rc = rte_eth_rx_queue_setup(id_, 0, rxd, static_cast<unsigned>(socket), &rxconf, pool_);
  if (rc < 0)
    return eth_error(name_, "rte_eth_rx_queue_setup", rc,
                     "the mbuf data room may be too small for the PMD (PortOptions::data_room); af_xdp: an "
                     "interface can be opened once per process");
  rte_eth_txconf txconf = info.default_txconf;
  txconf.offloads = conf.txmode.offloads;
  rc = rte_eth_tx_queue_setup(id_, 0, txd, static_cast<unsigned>(socket), &txconf);
  if (rc < 0) return eth_error(name_, "rte_eth_tx_queue_setup", rc, "check tx_desc");
  return ok();
}

void Port::apply_mtu(const rte_eth_dev_info& info, const PortOptions& opts) {
  // -ENOTSUP: the PMD has no mtu_set at all (ethdev checks that first);
  // -EINVAL: MTU + L2 overhead above the PMD's max_rx_pktlen (ethdev logs it).
  const int rc = rte_eth_dev_set_mtu(id_, opts.mtu);
  uint16_t now = 0;
  if (rte_eth_dev_get_mtu(id_, &now) != 0) now = RTE_ETHER_MTU;
  const int iface_mtu = kernel_mtu(devarg(opts.devargs, "iface"));
  if (rc == -ENOTSUP && opts.mtu >= info.min_mtu && opts.mtu <= info.max_mtu) {
    // No MTU setting at all (memif, ring): the PMD enforces no MTU, frames are
    // bounded by its buffers, which size_buffers() checked. Take the request.
    GREX_DEBUG("dpdk", "%s: PMD has no MTU setting; using MTU %u", name_.c_str(), opts.mtu);
    now = opts.mtu;
  } else if (rc < 0 && iface_mtu > now) {
    // af_packet (22.11) reports a 1518-byte max frame and so refuses any MTU
    // above 1500, yet carries whatever the kernel interface and framesz
    // (checked in size_buffers) allow: the interface's MTU is the limit.
    now = static_cast<uint16_t>(std::min<int>(opts.mtu, iface_mtu));
    if (now < opts.mtu)
      GREX_WARN("dpdk", "%s: interface %s has MTU %d; using it instead of %u (ip link set %s mtu %u)",
                name_.c_str(), devarg(opts.devargs, "iface").c_str(), iface_mtu, opts.mtu,
                devarg(opts.devargs, "iface").c_str(), opts.mtu);
  } else if (rc < 0 && now != opts.mtu) {
    const std::string iface = iface_mtu > 0 ? "; interface MTU " + std::to_string(iface_mtu) : "";
    GREX_WARN("dpdk", "%s: MTU %u refused (%s; PMD max frame %u B%s); keeping %u", name_.c_str(), opts.mtu,
              rte_strerror(-rc), info.max_rx_pktlen, iface.c_str(), now);
  }
  mtu_ = now;
}

uint32_t Port::link_speed_mbps() const noexcept {
  if (!probed_) return 0;
  // A kernel-carried port: DPDK's af_packet PMD reports a fixed 10 Gbit/s
  // whatever the interface. Ask the kernel, and only about a device with
  // hardware behind it (sysfs links `device` there); a veth, whose sysfs
  // speed is also a made-up 10 Gbit/s, capped RTTCC's rate at 10 Gbit/s
  // where the uncontrolled flows ran faster (docs/congestion.md).
  if (!iface_.empty()) return kernel_speed_mbps(iface_);
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(id_, &link) != 0 || link.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN) return 0;
  return link.link_speed;
}

bool Port::link_up() const noexcept {
  if (!probed_) return false;
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(id_, &link) != 0) return false;
  return link.link_status == RTE_ETH_LINK_UP;
}

// memif handles its control channel (the peer's connect and disconnect) in
// callbacks on EAL's interrupt thread, and a peer's disconnect frees the same
// regions and queues as rte_eth_dev_close: the two overlapping crashed in
// librte_net_memif (double rte_free) when both sides closed at about the same
// time. Closing on the interrupt thread itself, through an alarm, serialises
// close with those callbacks for every PMD.
void Port::stop() noexcept {
  if (!started_ && !probed_ && pool_ == nullptr) return;
  if (!eal_initialized() || rte_thread_is_intr()) {
    teardown();
    return;
  }
  struct Job {
    Port* port;
    std::atomic<bool> done{false};
  } job{this};
  auto run = [](void* arg) {
    auto* j = static_cast<Job*>(arg);
    j->port->teardown();
    j->done.store(true, std::memory_order_release);
  };
  if (rte_eal_alarm_set(1, run, &job) != 0) {
    GREX_DEBUG("dpdk", "%s: rte_eal_alarm_set failed; closing on this thread", name_.c_str());
    teardown();
    return;
  }
  const auto slow = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  bool warned = false;
  while (!job.done.load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (!warned && std::chrono::steady_clock::now() > slow) {
      GREX_WARN("dpdk", "%s: close waits for EAL's interrupt thread for over 1 s", name_.c_str());
      warned = true;
    }
  }
}

void Port::teardown() noexcept {
  if (started_) {
    const int rc = rte_eth_dev_stop(id_);
    if (rc < 0) GREX_DEBUG("dpdk", "%s: rte_eth_dev_stop: %s", name_.c_str(), rte_strerror(-rc));
    started_ = false;
  }
  if (probed_) {
    rte_eth_dev_close(id_);
    remove_vdev(name_);
    probed_ = false;
    GREX_DEBUG("dpdk", "%s: port %u closed", name_.c_str(), id_);
  }
  if (pool_ != nullptr) {
    rte_mempool_free(pool_);
    pool_ = nullptr;
  }
}

}  // namespace grex::dpdk
