// SPDX-License-Identifier: Apache-2.0
// The DPDK driver's Device, Endpoint and MemoryRegion: grex's reliable
// protocol (lib/transport/reliable_flow.h) in UDP/IPv4 on DPDK ports.
#pragma once

#include <grex/transport.h>

#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/counters.h"
#include "drivers/dpdk/dpdk_extbuf.h"
#include "drivers/dpdk/dpdk_frame.h"
#include "drivers/dpdk/dpdk_port.h"
#include "drivers/dpdk/dpdk_paths.h"
#include "transport/fault_injector.h"
#include "congestion/cc.h"
#include "transport/reliable_flow.h"
#include "transport/wire_auth.h"

namespace grex::dpdk {

using frame::FrameAddr;
using frame::Mac;
using frame::ParseError;
using frame::Parsed;
using frame::kEthHeaderBytes;
using frame::kHeadersBytes;
using frame::kIpv4HeaderBytes;
using frame::kUdpHeaderBytes;

class DpdkDevice;

/// Driver options, from DeviceOptions::params and GREX_DPDK_* (see dpdk.h).
struct DpdkOptions {
  std::string mode = "memif";   ///< "memif": a memif port per peer; "port": one shared port
  std::string devargs;          ///< port mode: the vdev ("net_af_packet0,iface=veth0,...")
  /// port mode: the MAC the port answers to, from GREX_DPDK_MAC (auto, port,
  /// private or aa:bb:cc:dd:ee:ff; auto is private on af_packet)
  PortOptions::Mac mac = PortOptions::Mac::kPort;
  std::array<uint8_t, 6> given_mac{};
  std::string memif_dir = "/tmp";
  /// memif: "auto" (a rank whose EAL memory is shareable, GREX_DPDK_HUGE=1
  /// with hugepages, runs its link to rank 0 in zero-copy mode),
  /// "1" (required: an error without hugepages) or "0" [GREX_DPDK_MEMIF_ZERO_COPY]
  std::string memif_zero_copy = "auto";
  uint32_t ip = 0;              ///< port mode: our IPv4 (host order); 0: 10.77.<rank>
  /// port mode: peers are behind this router (a routed fabric, each host its
  /// own subnet): frames to them go to its MAC, and theirs arrive from it
  /// [GREX_DPDK_GATEWAY, per local rank]
  bool via_gateway = false;
  std::array<uint8_t, 6> gateway_mac{};
  uint16_t udp_port = 47000;
  uint16_t mtu = 9000;
  uint32_t mbufs = 16383;
  uint32_t window = 1024;
  uint32_t reorder = 0;  // packets a late one may be overtaken by before it counts as lost
  uint32_t paths = 1;    // UDP source ports a flow's data packets spray over (ECMP entropy)
  bool reps = false;     // ... choosing them by REPS (dpdk_paths.h), not round robin
  bool path_cc = false;  // a congestion controller per path, the flow paced at their sum (dpdk_paths.h)
  uint32_t adverts_per_packet = 32;  ///< receives advertised in one packet at most
  /// Packets a port's software TX queue may hold before flows wait (what
  /// one pass of the flows hands the PMD at most); 0: 32 [GREX_DPDK_TX_BACKLOG].
  uint32_t tx_backlog = 0;
  int64_t give_up_ms = 10'000;
  bool payload_crc = false;
  /// What each packet's tag covers [GREX_WIRE_AUTH=full|control|off, GREX_WIRE_CRYPT=aes-gcm]
  wire::AuthMode auth = wire::AuthMode::kFull;
  /// Bits of a flow id kept (tests: 1 makes every flow of a port collide) [GREX_DPDK_FLOW_ID_BITS]
  int flow_id_bits = 32;
  FaultConfig faults;
  const cc::Algorithm* cc = nullptr;  ///< congestion control per flow; nullptr: none
  double line_gbps = 100;             ///< the controllers' line rate
  uint64_t cc_target_us = 50;         ///< RTTCC's target delay on this software path (200 on af_packet, af_xdp)
  /// Receiver credits (reliable::Config::credits): this rank grants its
  /// senders data packets, paced at credit_gbps (0: the line rate) over its
  /// flows [GREX_DPDK_CREDITS=1, GREX_DPDK_CREDIT_MBPS]; a flow's first
  /// packets (reliable::Config::credit_initial) need no grant
  bool credits = false;
  double credit_gbps = 0;
  uint32_t credit_window = 32;  ///< packets granted, not arrived, over all flows [GREX_DPDK_CREDIT_WINDOW]
  double bottleneck_gbps = 0;         ///< emulated bottleneck in front of this rank's receive path; 0: none
  uint64_t bottleneck_kb = 4096;      ///< its queue (tail drop beyond)
};

/// Registered memory: the range is known to EAL (rte_extmem_register) once a
/// port exists, so TX attaches it to mbufs without copying.
class DpdkRegion final : public MemoryRegion {
 public:
  DpdkRegion(DpdkDevice* dev, void* addr, size_t len, uint32_t id, uint32_t rkey);
  ~DpdkRegion() override;
  uint32_t id() const noexcept { return id_; }
  uint32_t rkey() const noexcept { return rkey_; }
  /// Shared info for attaching, or nullptr while not registered with EAL.
  rte_mbuf_ext_shared_info* shinfo() const noexcept { return ext_ ? ext_->shinfo() : nullptr; }
  Result<void> register_with_eal(uint16_t port_id);

 private:
  DpdkDevice* dev_;
  uint32_t id_;
  uint32_t rkey_;  // random: a peer names a region only by what it was told
  std::unique_ptr<ExternalRegion> ext_;
};

class DpdkEndpoint final : public Endpoint {
 public:
  /// `tx`/`rx`: the keys of each direction (wire_auth.h); their flow ids name the flow on the wire.
  DpdkEndpoint(DpdkDevice* dev, int peer, Port* port, const FrameAddr& addr, const reliable::Config& cfg,
               const wire::DirectionKeys& tx, const wire::DirectionKeys& rx);
  ~DpdkEndpoint() override;

  PostResult post_send(std::span<const SendRequest> reqs) noexcept override;
  PostResult post_recv(std::span<const RecvRequest> reqs) noexcept override;
  PostResult post_write(std::span<const WriteRequest> reqs) noexcept override;
  bool peer_failed() const noexcept override { return flow_.failed(); }
  void announce_abort(int culprit) noexcept override;
  int peer_abort_culprit() const noexcept override { return flow_.peer_abort_culprit(); }
  std::string describe_peer() const override;

  reliable::Flow& flow() noexcept { return flow_; }
  Port* port() const noexcept { return port_; }
  const FrameAddr& addr() const noexcept { return addr_; }
  bool connected = false;     ///< CONNECT_ACK seen
  bool peer_closed = false;   ///< the peer sent kClose
  uint32_t rx_flow_id() const noexcept { return rx_id_; }
  uint32_t tx_flow_id() const noexcept { return tx_id_; }
  uint64_t next_seq() noexcept { return tx_seq_++; }
  /// Which sprayed path (UDP source port offset) each data packet takes.
  PathChooser& paths() noexcept { return paths_; }
  /// Paths the peer's packets came over: bit i for source port offset i.
  uint64_t& rx_paths() noexcept { return rx_paths_; }
  wire::Sealer& sealer() noexcept { return tx_; }
  wire::Sealer& opener() noexcept { return rx_; }
  wire::ReplayWindow& replay() noexcept { return replay_; }

 private:
  DpdkDevice* dev_;
  Port* port_;
  FrameAddr addr_;  // our side as source, the peer as destination
  reliable::Flow flow_;
  uint32_t tx_id_, rx_id_;
  uint64_t tx_seq_ = 0;
  PathChooser paths_;
  uint64_t rx_paths_ = 0;
  wire::Sealer tx_, rx_;
  wire::ReplayWindow replay_;
};

class DpdkDevice final : public Device, public reliable::RegionTable {
 public:
  explicit DpdkDevice(const DeviceOptions& opts);
  ~DpdkDevice() override;
  Result<void> init();

  const Capabilities& capabilities() const noexcept override { return caps_; }
  Result<std::string> local_address() override;
  Result<std::unique_ptr<Endpoint>> connect(int peer, std::string_view peer_address) override;
  size_t poll(std::span<Completion> out) noexcept override;
  std::vector<std::pair<std::string, uint64_t>> counters() const override;
  uint8_t* resolve(uint32_t rkey, uint64_t offset, uint64_t len) noexcept override;

  // Used by endpoints and regions.
  void remove_endpoint(DpdkEndpoint* ep) noexcept;
  void remove_flow(uint32_t id, DpdkEndpoint* ep) noexcept;
  void close_endpoint(DpdkEndpoint* ep) noexcept;
  void flush(DpdkEndpoint* ep) noexcept;
  void forget_region(uint32_t id) noexcept;
  int rank() const noexcept { return opts_.rank; }

  struct Stats {
    Counter rx_packets, tx_packets, rx_bad_frame, rx_bad_header, rx_unknown_flow, rx_bad_source, rx_auth_failed,
        rx_replayed, rx_authenticated, rx_untagged, tx_ring_full, tx_no_mbuf,
        copied_tx, zero_copy_tx, faults_dropped, faults_duplicated, faults_reordered, faults_corrupted, faults_garbage;
  };
  Stats stats;

  /// The emulated bottleneck (tests of congestion control on one host): every
  /// received frame waits in a FIFO served at the bottleneck rate, so its
  /// delay is queue / rate, as in a switch's egress queue.
  struct Bottleneck {
    struct Pkt {
      rte_mbuf* m;
      uint32_t port;
      uint64_t arrive_ns, depart_ns;
    };
    double ns_per_byte = 0;       // 0: off
    uint64_t cap_bytes = 0;
    std::vector<Pkt> ring;        // fixed at init: no allocation on the data path
    size_t head = 0, n = 0;
    uint64_t busy_until_ns = 0;   // when the link has sent what it holds
    uint64_t read_ns = 0;         // the previous poll's read of the rings
    uint64_t packets = 0, drops = 0, max_bytes = 0;
    std::vector<uint32_t> delay_hist;  // 1 us bins; the last one collects the rest
  };

 protected:
  Result<std::unique_ptr<MemoryRegion>> do_register(void* addr, size_t length, MemoryDomain domain) override;

 private:
  struct Held {
    rte_mbuf* m;
    uint32_t countdown;
    Port* port;
  };
  Result<void> parse_options();
  /// memif: `peer_shares` is whether the peer's address says its memory is
  /// shareable (it decides the link's mode when the peer is the client).
  Result<Port*> port_for(int peer, bool peer_shares);
  Result<void> handshake(DpdkEndpoint* ep);
  /// Receives up to kRxRounds bursts; true when the port's ring ran dry.
  bool rx(size_t port_index, uint64_t now) noexcept;
  void deliver(Port* port, rte_mbuf* m, uint64_t now) noexcept;  // handle + free
  void to_bottleneck(size_t port_index, rte_mbuf** bufs, size_t n, uint64_t now) noexcept;
  void drain_bottleneck(uint64_t now) noexcept;
  uint64_t bottleneck_delay_percentile_us(double q) const noexcept;
  void handle(Port* port, uint8_t* frame, size_t len, uint64_t now) noexcept;
  /// Checks a packet's source, tag and counter for `ep` and decrypts its
  /// payload in place; false (counted) when it is not from the peer.
  /// *authentic: whether a tag vouched for h (false for every packet under
  /// GREX_WIRE_AUTH=off, and for data packets under control, whose ACK
  /// fields then count for nothing).
  bool admit(DpdkEndpoint* ep, const Parsed& p, const wire::Header& h, bool* authentic) noexcept;
  /// Whether a frame comes from ep's peer: its IP and UDP port (and MAC on a shared port).
  bool from_peer(const DpdkEndpoint* ep, const Parsed& p) const noexcept;
  /// Writes the counter and tag into an encoded header (hdr: the grex header),
  /// encrypting the payload into `enc` where the mode says so.
  bool seal(DpdkEndpoint* ep, uint8_t* hdr, const wire::Header& h, const uint8_t* payload, uint8_t* enc) noexcept;
  void send_ctrl(DpdkEndpoint* ep, wire::Header h) noexcept;
  void transmit(DpdkEndpoint* ep, const reliable::TxPacket& p) noexcept;
  void send_garbage(Port* port, const FaultDecision& d, const uint8_t* frame_hdr) noexcept;
  void enqueue(Port* port, rte_mbuf* m) noexcept;
  std::span<reliable::TxPacket> tx_room(const Port* port) noexcept;
  std::vector<rte_mbuf*>* txq_of(const Port* port) noexcept;  // the port's software TX queue
  void flush_tx() noexcept;
  /// Lets every flow build what it may send now into its port's queue.
  /// Every flow's packets; `timers` as reliable::Flow::poll_tx's.
  size_t build_tx(uint64_t now, bool timers) noexcept;
  uint64_t timers_ns_ = 0;  // when poll() last ran the flows' timers
  uint64_t rx_read_ns_ = 0;  // when poll() last read every receive ring to its end
  uint64_t rx_gap_ns_ = 0;   // this poll's time since then
  bool connected_once(size_t port) const noexcept;
  void mark_dead(size_t port) noexcept;

  DeviceOptions opts_;
  DpdkOptions dopts_;
  Capabilities caps_;
  reliable::Config flow_cfg_;
  std::string host_id_;
  bool shares_memory_ = false;  // memif: this rank's link to rank 0 may be zero-copy (init)
  uint32_t instance_ = 0;  // devices this process opened before this one (vdev names)
  std::vector<std::unique_ptr<Port>> ports_;
  std::vector<int> port_peer_;               // memif: the peer of ports_[i]
  std::vector<char> port_dead_;              // memif: the link went down after it was up
  std::vector<DpdkEndpoint*> by_rank_;       // endpoint for each peer rank
  // By the flow id peers address us with. Ids are 32 random bits per flow, so
  // two peers of a large job may draw the same one (1024 ranks: about one
  // device in ten); the peer's port and address tell them apart.
  std::unordered_multimap<uint32_t, DpdkEndpoint*> by_flow_;
  std::string job_key_;                      // 32 bytes (DeviceOptions::job_key, or from the job id)
  uint8_t nonce_[wire::kNonceBytes] = {};    // this device's, in its address: fresh keys per instance
  std::vector<std::vector<rte_mbuf*>> txq_;  // per port: built, not yet taken by the PMD
  std::vector<Held> held_;                   // reordered packets waiting for their turn
  std::vector<uint8_t> linear_;              // RX bounce for multi-segment mbufs
  static constexpr size_t kTxPerPoll = 64;   // packets one flow may emit per poll
  size_t tx_backlog_ = 32;                   // software TX queue a port may hold before flows wait
  static constexpr size_t kTxMinRoom = 2;    // ... except for this many (ACKs, probe replies)
  size_t tx_start_ = 0;                      // the flow that builds packets first this poll
  std::vector<reliable::TxPacket> txpk_;     // poll_tx scratch, allocated once (no per-poll zeroing)
  std::vector<DpdkRegion*> regions_;         // by id - 1
  std::unordered_map<uint32_t, DpdkRegion*> by_rkey_;
  std::vector<std::string> memif_markers_;   // ready markers this rank (a memif server) still owns
  FaultInjector faults_;
  Bottleneck bn_;
  // Receiver credits: a token bucket at the credit rate, spent one data
  // packet's frame at a time on the flows that want grants, round robin.
  struct CreditPacer {
    double bytes = 0, bytes_per_ns = 0, pkt_bytes = 0;
    uint64_t last_ns = 0;
    size_t next = 0;
  } credit_;
  void grant_credits(uint64_t now) noexcept;
  uint32_t next_region_id_ = 1;
  uint32_t max_payload_ = 0;
  uint32_t ip_ = 0;
  bool port_mode_ = false;  // one shared port (else memif, a port per peer)
};

}  // namespace grex::dpdk
