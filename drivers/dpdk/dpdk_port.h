// SPDX-License-Identifier: Apache-2.0
// One DPDK ethdev port on a hot-plugged virtual device: setup, one RX and one TX queue, inline bursts.
//
// Only drivers/dpdk/*.cc, DPDK tests and benchmarks include this header (it
// pulls in rte_ethdev.h for the inline fast path).
//
// Threads: open() and stop() are setup calls (any thread, not concurrently
// with each other on the same port). rx_burst() and tx_burst() use queue 0 and
// are not thread-safe: one polling thread per port.
//
// memif pitfall: net_memif crashes (in librte_net_memif) when one peer closes
// its port while the other is still polling. Both peers must stop calling
// rx_burst()/tx_burst() before either calls stop(); the caller coordinates
// that (e.g. through the bootstrap store: "stopped polling" from both ranks,
// then close). Once neither polls, the two may close in any order or at the
// same time (stop() serialises with memif's disconnect handling).
// Other memif facts (DPDK 22.11): a client that connects before the server's
// port has started is refused and does not retry; the server's listening
// socket (abstract by default) stays bound until the process exits, so a
// socket path can be served once per process; set bsize >= the largest frame
// on both peers (open() refuses a smaller one).
#pragma once

#include <grex/result.h>

#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_mbuf.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace grex::dpdk {

/// The largest MTU whose frame (Ethernet header and two VLAN tags) fits one
/// mbuf: a data room, headroom included and rounded to 128 B, is 16-bit.
/// 65258: jumbo links that only software carries (veth, bridges) take it; a
/// NIC's own limit is lower and applies.
inline constexpr uint16_t kMaxMtu =
    static_cast<uint16_t>(UINT16_MAX / 128 * 128 - RTE_PKTMBUF_HEADROOM - RTE_ETHER_HDR_LEN - 2 * RTE_VLAN_HLEN);

/// How to open a port. The vdev's own arguments go in `devargs`.
struct PortOptions {
  /// "<driver><n>,key=value,...", e.g.
  ///   net_memif0,role=server,socket=/tmp/x.sock,id=0,bsize=10240
  ///   net_af_packet0,iface=veth0,framesz=10240,blocksz=20480,framecnt=512
  ///   net_af_xdp0,iface=veth0
  std::string devargs;
  uint16_t mtu = 1500;      ///< requested MTU, 68..65258; mtu() says what the PMD took
  uint32_t mbufs = 8191;    ///< mempool size (2^n - 1 is optimal)
  uint16_t rx_desc = 1024;  ///< adjusted to the PMD's limits
  uint16_t tx_desc = 1024;
  /// mbuf data room including RTE_PKTMBUF_HEADROOM; 0 derives it from the MTU
  /// (and af_packet's framesz), capped at 3840 for af_xdp.
  uint16_t data_room = 0;
  /// The MAC the port answers to (mac()): the port's own (kPort), one
  /// derived from it for a port shared with the kernel (kPrivate,
  /// frame::private_mac), or `given`. The last two need promiscuous mode;
  /// a port that refuses it keeps its own MAC (logged).
  enum class Mac : uint8_t { kPort, kPrivate, kGiven };
  Mac mac = Mac::kPort;
  std::array<uint8_t, 6> given_mac{};
};

/// Offloads the port offered and that open() enabled.
struct Offloads {
  bool tx_ip_cksum = false;   ///< RTE_ETH_TX_OFFLOAD_IPV4_CKSUM
  bool tx_udp_cksum = false;  ///< RTE_ETH_TX_OFFLOAD_UDP_CKSUM
  bool tx_multi_seg = false;  ///< RTE_ETH_TX_OFFLOAD_MULTI_SEGS (chained mbufs)
  /// TX may chain user memory (extbufs) to a frame: multi-segment, and not a
  /// memif client in zero-copy mode, which hands its peer the offset of each
  /// segment in its own EAL memory and so can send only mbufs of its pools.
  bool tx_extbuf = false;
  bool rx_ip_cksum = false;   ///< RTE_ETH_RX_OFFLOAD_IPV4_CKSUM
  bool rx_udp_cksum = false;  ///< RTE_ETH_RX_OFFLOAD_UDP_CKSUM
};

/// An open, started ethdev port with one RX and one TX queue and its own mempool.
class Port {
 public:
  /// Initialises EAL if needed (eal_init() defaults), hot-plugs the vdev,
  /// creates the mempool, configures 1 RX + 1 TX queue, sets the MTU (a PMD
  /// that refuses keeps its own, see mtu()), enables the offloads it offers,
  /// starts the port and turns on promiscuous mode where supported.
  /// Errors: kInvalidArgument (bad options, memif bsize or af_packet framesz
  /// too small for the MTU), kNoMemory (mempool), kSystem/kNotFound (EAL,
  /// probe, configure or start failed; the cause names the call).
  static Result<std::unique_ptr<Port>> open(const PortOptions& opts);

  ~Port();
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  /// ethdev port id.
  uint16_t id() const noexcept { return id_; }
  /// Device name, e.g. "net_memif0".
  const std::string& name() const noexcept { return name_; }
  /// The MAC grex sends from and answers to (PortOptions::mac).
  std::array<uint8_t, 6> mac() const noexcept { return mac_; }
  /// The MTU in effect: the requested one if the PMD took it; if it has no
  /// MTU setting (memif) the requested one too (open() checked bsize); if it
  /// refused, the kernel interface's MTU where there is one (af_packet, whose
  /// ethdev limit is 1500 but which carries what the interface does), else
  /// the PMD's own (logged as a warning).
  uint16_t mtu() const noexcept { return mtu_; }
  /// Bytes of frame one mbuf of pool() holds (data room minus headroom).
  uint16_t mbuf_bytes() const noexcept { return mbuf_bytes_; }
  /// Offloads enabled on this port.
  const Offloads& offloads() const noexcept { return offloads_; }
  bool tx_multi_seg() const noexcept { return offloads_.tx_multi_seg; }
  bool tx_extbuf() const noexcept { return offloads_.tx_extbuf; }
  bool tx_ip_cksum() const noexcept { return offloads_.tx_ip_cksum; }
  bool tx_udp_cksum() const noexcept { return offloads_.tx_udp_cksum; }
  /// The port's mempool (RX buffers; also for TX header mbufs).
  rte_mempool* pool() const noexcept { return pool_; }
  /// Link status now (memif: up once the peer connected). Non-blocking.
  /// The link speed in Mbit/s, or 0 when not known. A port the kernel
  /// carries (af_packet, af_xdp) reports its interface's speed where that is
  /// a physical device's, and 0 on a virtual one (veth, a bridge), which has
  /// no rate: the PMDs report a constant there, not the interface's speed.
  uint32_t link_speed_mbps() const noexcept;
  bool link_up() const noexcept;

  /// Receives up to n packets from queue 0. Never blocks.
  uint16_t rx_burst(rte_mbuf** pkts, uint16_t n) noexcept { return rte_eth_rx_burst(id_, 0, pkts, n); }
  /// Queues up to n packets on queue 0; returns how many the port took (it
  /// owns and frees those); the caller keeps the rest. Never blocks.
  uint16_t tx_burst(rte_mbuf** pkts, uint16_t n) noexcept { return rte_eth_tx_burst(id_, 0, pkts, n); }
  /// Sets the mbuf flags so the NIC fills the IPv4 header checksum when the
  /// port offers it (write the header with sw_ip_cksum = !tx_ip_cksum()).
  void set_tx_cksum_flags(rte_mbuf* m) const noexcept {
    if (!offloads_.tx_ip_cksum) return;
    m->l2_len = 14;
    m->l3_len = 20;
    m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
  }

  /// Stops and closes the port, removes the vdev and frees the mempool.
  /// Idempotent; the destructor calls it. Blocks until done: the work runs
  /// on EAL's interrupt thread (an alarm) so that it never overlaps the
  /// PMD's own control callbacks there (memif's handling of the peer's
  /// disconnect). Every mbuf of pool() must have been freed, and (memif) the
  /// peer must have stopped polling, see above. Call it before any
  /// rte_eal_cleanup(), and not in a child forked after EAL started.
  void stop() noexcept;

 private:
  Port() = default;
  Result<void> setup(const PortOptions& opts);
  Result<void> configure(const PortOptions& opts);
  void apply_mtu(const rte_eth_dev_info& info, const PortOptions& opts);
  void teardown() noexcept;

  uint16_t id_ = 0;
  std::string name_;
  std::string iface_;  // af_packet, af_xdp: the kernel interface (devargs' iface=)
  std::array<uint8_t, 6> mac_{};
  uint16_t mtu_ = 0;
  uint16_t mbuf_bytes_ = 0;
  Offloads offloads_;
  rte_mempool* pool_ = nullptr;
  bool probed_ = false;
  bool started_ = false;
};

}  // namespace grex::dpdk
