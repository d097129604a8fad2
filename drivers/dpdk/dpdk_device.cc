// SPDX-License-Identifier: Apache-2.0
// DPDK driver setup: EAL and ports, addresses, connection handshake,
// memory registration, teardown (its options: dpdk_options.cc).
#include "drivers/dpdk/dpdk_device.h"

#include <arpa/inet.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <thread>

#include "transport/params.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/host.h"
#include "core/log.h"
#include "drivers/dpdk/dpdk.h"
#include "drivers/dpdk/dpdk_address.h"
#include "drivers/dpdk/dpdk_eal.h"

namespace grex::dpdk {
namespace {

constexpr const char* kSubsys = "dpdk";
constexpr size_t kGrexOverheadBytes = wire::kHeaderBytes + kIpv4HeaderBytes + kUdpHeaderBytes;
/// log2 of a zero-copy memif link's ring slots (port_for). 64 and 128 slots
/// measured alike, 256 lost a sixth at 8 KiB, 1024 a fifth from 64 KiB up.
constexpr int kMemifZeroCopyRingLog2 = 7;

}  // namespace

// ---------------------------------------------------------------- regions

DpdkRegion::DpdkRegion(DpdkDevice* dev, void* addr, size_t len, uint32_t id, uint32_t rkey)
    : MemoryRegion(addr, len, MemoryDomain::kHost), dev_(dev), id_(id), rkey_(rkey) {
  lkey_ = id;
  remote_ = RemoteRegion{reinterpret_cast<uint64_t>(addr), len, rkey, static_cast<uint64_t>(dev->rank())};
}

DpdkRegion::~DpdkRegion() { dev_->forget_region(id_); }

Result<void> DpdkRegion::register_with_eal(uint16_t port_id) {
  if (ext_ || length() == 0) return ok();
  ext_ = GREX_TRY(ExternalRegion::create(addr(), length(), port_id));
  return ok();
}

// ---------------------------------------------------------------- endpoints

DpdkEndpoint::DpdkEndpoint(DpdkDevice* dev, int peer, Port* port, const FrameAddr& addr,
                           const reliable::Config& cfg, const wire::DirectionKeys& tx, const wire::DirectionKeys& rx)
    : Endpoint(peer),
      dev_(dev),
      port_(port),
      addr_(addr),
      flow_(cfg, rx.flow_id, tx.flow_id, peer, dev),
      tx_id_(tx.flow_id),
      rx_id_(rx.flow_id) {
  tx_.init(tx, true);
  rx_.init(rx, false);
}

DpdkEndpoint::~DpdkEndpoint() {
  dev_->close_endpoint(this);
  dev_->remove_endpoint(this);
}

std::string DpdkEndpoint::describe_peer() const {
  char ip[INET_ADDRSTRLEN];
  uint32_t be = htonl(addr_.dst_ip);
  inet_ntop(AF_INET, &be, ip, sizeof(ip));
  return "rank " + std::to_string(peer_) + " (" + ip + ":" + std::to_string(addr_.dst_port) + " via " +
         (port_ != nullptr ? port_->name() : std::string("?")) + ")";
}

void DpdkEndpoint::announce_abort(int culprit) noexcept {
  flow_.close(culprit);
  dev_->flush(this);
}

// ---------------------------------------------------------------- device setup

DpdkDevice::DpdkDevice(const DeviceOptions& opts) : opts_(opts) {}

Result<void> DpdkDevice::init() {
  GREX_TRY(parse_options());
  if (opts_.job_id.empty()) return Error(Errc::kInvalidArgument, "dpdk needs a job id").device("dpdk");
  // EAL pins the calling thread to one CPU; with several ranks per host that
  // serialises them. Keep the thread's own mask unless GREX_DPDK_PIN=1.
  cpu_set_t mask;
  bool have_mask = sched_getaffinity(0, sizeof(mask), &mask) == 0;
  EalOptions eal;
  eal.file_prefix = "grex-" + std::to_string(::getpid());
  if (dopts_.mode == "port" && is_pci_devargs(dopts_.devargs)) eal.pci_devices = {dopts_.devargs};  // a real NIC
  if (dopts_.mode == "memif" && dopts_.memif_zero_copy != "0") {
    // Zero-copy memif needs EAL's memory fixed at start (dpdk_eal.h): room
    // for a pool per peer (mbufs of MTU + 512 B) and 64 MB for the rest.
    const uint64_t pool_mb = (uint64_t{dopts_.mbufs} * (dopts_.mtu + 512u) >> 20) + 8;
    eal.huge_memory_mb = static_cast<uint32_t>(std::min<uint64_t>(
        GREX_TRY(detail::param_int(opts_, "huge_mb", "GREX_DPDK_HUGE_MB", 0, 1 << 20,
                                   static_cast<int64_t>(64 + pool_mb * static_cast<uint64_t>(opts_.world_size - 1)))),
        UINT32_MAX));
  }
  auto r = eal_init(eal);
  bool pin = false;
  GREX_TRY(config::env_bool("GREX_DPDK_PIN", &pin));
  if (have_mask && !pin) sched_setaffinity(0, sizeof(mask), &mask);
  if (!r) return std::move(r).error().rank(opts_.rank).device("dpdk");

  if (dopts_.mode == "memif" && dopts_.memif_zero_copy != "0") {
    // DPDK 22.11's memif lets a process share its memory once: the first
    // zero-copy link closes the segment files a second one would need. So a
    // process takes one zero-copy link, its link to rank 0 (where this rank
    // is the client), in the first device that can.
    static std::atomic<bool> zero_copy_taken{false};
    const bool shareable = eal_memory_shareable();
    shares_memory_ = shareable && opts_.rank > 0 && !zero_copy_taken.exchange(true);
    if (shareable && opts_.rank > 0 && !shares_memory_)
      GREX_INFO(kSubsys, "this process already has its zero-copy memif link; this device's links copy");
    if (!shareable && dopts_.memif_zero_copy == "1")
      return Error(Errc::kNotSupported, "memif zero-copy needs EAL on hugepages")
          .rank(opts_.rank)
          .device("dpdk")
          .hint("set GREX_DPDK_HUGE=1 with enough free hugepages (GREX_DPDK_HUGE_MB, by default 64 MB + 45 MB "
                "per peer: echo 256 > /proc/sys/vm/nr_hugepages), or GREX_DPDK_MEMIF_ZERO_COPY=auto");
  }
  host_id_ = grex::machine_id();
  job_key_ = opts_.job_key.size() == wire::kJobKeyBytes ? opts_.job_key : wire::derive_job_key(opts_.job_id, opts_.job_id);
  if (job_key_.size() != wire::kJobKeyBytes || !wire::random_bytes(nonce_, sizeof(nonce_)))
    return Error(Errc::kInternal, "cannot derive the wire keys (libcrypto)").rank(opts_.rank).device("dpdk");
  if (opts_.job_key.empty() && dopts_.auth != wire::AuthMode::kOff)
    GREX_INFO(kSubsys, "no job key given: wire tags keyed by the job id (integrity, not secrecy of the key)");
  static std::atomic<uint32_t> instances{0};
  instance_ = instances.fetch_add(1, std::memory_order_relaxed);
  max_payload_ = static_cast<uint32_t>(dopts_.mtu - kGrexOverheadBytes);
  max_payload_ &= ~63u;  // keep payloads cache-line multiples
  flow_cfg_.max_payload = max_payload_;
  flow_cfg_.window = dopts_.window;
  flow_cfg_.reorder_packets = dopts_.reorder;
  flow_cfg_.rto_from_acks = dopts_.paths > 1;  // the probes see the base port's path only
  flow_cfg_.adverts_per_packet = dopts_.adverts_per_packet;
  flow_cfg_.queue_depth = opts_.queue_depth;
  flow_cfg_.give_up_ns = static_cast<uint64_t>(dopts_.give_up_ms) * 1'000'000;
  flow_cfg_.keepalive_ns = std::min<uint64_t>(flow_cfg_.give_up_ns / 4, 100'000'000);
  flow_cfg_.payload_crc = dopts_.payload_crc;
  flow_cfg_.cc = dopts_.cc;
  // Software timestamps: the unloaded RTT includes both hosts' polling, and
  // their jitter is tens of microseconds, not the 13 us a NIC's timestamps
  // allow: RTTCC's target here is cc_target_us (50 by default).
  cc::use_software_timestamps(&flow_cfg_.cc_options, dopts_.cc_target_us * 1000);
  faults_ = FaultInjector(dopts_.faults);
  ip_ = dopts_.ip != 0 ? dopts_.ip : (0x0a4d0000u | static_cast<uint32_t>(opts_.rank + 1));  // 10.77.x.y
  by_rank_.assign(static_cast<size_t>(opts_.world_size), nullptr);
  // 16 instead of 32 trades 8 KiB writes over memif (+9 %) against 64 KiB
  // sends and 4 MiB messages (-8 to -11 %), and costs af_packet a sendto per
  // burst (docs/benchmarks.md): 32 stays the default.
  tx_backlog_ = dopts_.tx_backlog != 0 ? std::max<size_t>(dopts_.tx_backlog, kTxMinRoom) : 32;
  linear_.resize(16384);
  txpk_.resize(kTxPerPoll);

  port_mode_ = dopts_.mode == "port";
  if (port_mode_) {
    PortOptions po;
    po.devargs = dopts_.devargs;
    po.mac = dopts_.mac;
    po.given_mac = dopts_.given_mac;
    po.mtu = dopts_.mtu;
    po.mbufs = dopts_.mbufs;
    auto port = Port::open(po);
    if (!port) return std::move(port).error().rank(opts_.rank).device("dpdk");
    // The PMD may cap the MTU (af_xdp): size packets by what it took.
    uint16_t mtu = std::min<uint16_t>((*port)->mtu(), static_cast<uint16_t>((*port)->mbuf_bytes() - kEthHeaderBytes));
    max_payload_ = std::min<uint32_t>(max_payload_, static_cast<uint32_t>(mtu - kGrexOverheadBytes) & ~63u);
    flow_cfg_.max_payload = max_payload_;
    if (dopts_.line_gbps <= 0 && (*port)->link_speed_mbps() > 0) dopts_.line_gbps = (*port)->link_speed_mbps() / 1000.0;
    ports_.push_back(std::move(*port));
    port_peer_.push_back(-1);
    port_dead_.push_back(0);
    txq_.emplace_back();
  }
  flow_cfg_.line_rate_bps = (dopts_.line_gbps > 0 ? dopts_.line_gbps : 100.0) * 1e9;
  if (dopts_.credits) {
    flow_cfg_.credits = true;
    flow_cfg_.credit_window = dopts_.credit_window;
    flow_cfg_.credit_initial = std::min(flow_cfg_.credit_initial, dopts_.credit_window);
    credit_.bytes_per_ns = (dopts_.credit_gbps > 0 ? dopts_.credit_gbps : flow_cfg_.line_rate_bps / 1e9) / 8;
    credit_.pkt_bytes = static_cast<double>(max_payload_ + kGrexOverheadBytes + kEthHeaderBytes);
    GREX_INFO("dpdk", "receiver credits: grants paced at %.3f Gbit/s", credit_.bytes_per_ns * 8);
  }
  if (dopts_.bottleneck_gbps > 0) {
    bn_.ns_per_byte = 8.0 / dopts_.bottleneck_gbps;
    bn_.cap_bytes = dopts_.bottleneck_kb * 1024;
    bn_.ring.resize(bn_.cap_bytes / 64 + 16);
    bn_.delay_hist.assign(1 << 16, 0);  // 1 us bins up to 65 ms
    GREX_INFO("dpdk", "emulated bottleneck on receive: %.3f Gbit/s, %llu KiB queue", dopts_.bottleneck_gbps,
              static_cast<unsigned long long>(dopts_.bottleneck_kb));
  }
  if (dopts_.cc != nullptr)
    GREX_INFO("dpdk", "congestion control %s, line rate %.0f Gbit/s", dopts_.cc->name, flow_cfg_.line_rate_bps / 1e9);
  caps_.driver = "dpdk";
  caps_.device_name = dopts_.mode == "port" ? ports_[0]->name() : "net_memif (per peer)";
  caps_.send_recv = true;
  caps_.write_imm = true;
  caps_.zero_copy_send = true;
  caps_.max_message_bytes = UINT32_MAX;
  caps_.max_post_batch = opts_.queue_depth;
  caps_.queue_depth = opts_.queue_depth;
  caps_.mtu_bytes = dopts_.mtu;
  GREX_INFO(kSubsys, "mode %s, mtu %u, payload %u B per packet, window %u, wire auth %s, faults %s",
            dopts_.mode.c_str(), dopts_.mtu, max_payload_, dopts_.window, wire::auth_mode_name(dopts_.auth),
            dopts_.faults.any() ? "on" : "off");
  return ok();
}

Result<std::unique_ptr<Device>> open_device(const DeviceOptions& opts) {
  auto dev = std::make_unique<DpdkDevice>(opts);
  GREX_TRY(dev->init());
  return std::unique_ptr<Device>(std::move(dev));
}

DpdkDevice::~DpdkDevice() {
  for (const auto& m : memif_markers_) ::unlink(m.c_str());
  // Endpoints closed their connections; give a memif peer a moment to
  // leave its poll loop before the ports go away.
  if (!ports_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  release_all_registrations();
  for (auto& q : txq_)
    for (rte_mbuf* m : q) rte_pktmbuf_free(m);
  for (auto& h : held_) rte_pktmbuf_free(h.m);
  for (; bn_.n > 0; --bn_.n, bn_.head = (bn_.head + 1) % bn_.ring.size()) rte_pktmbuf_free(bn_.ring[bn_.head].m);
  for (auto& p : ports_) p->stop();
}

// Graceful close of one connection: send CLOSE (carrying our ACKs) until the
// peer's CLOSE arrives, polling meanwhile so we still answer its
// retransmissions, for at most kCloseWaitMs. Both sides of a memif link thus
// stop using it before either closes the port.
void DpdkDevice::close_endpoint(DpdkEndpoint* ep) noexcept {
  constexpr int64_t kCloseWaitMs = 200;
  Deadline dl = Deadline::after_ms(kCloseWaitMs);
  uint64_t next_ns = 0;
  Completion sink[32];
  bool sent_once = false;
  while (!dl.expired()) {
    uint64_t now = now_ns();
    if (now >= next_ns) {
      ep->flow().close(-1);
      flush(ep);
      sent_once = true;
      next_ns = now + 1'000'000;
    }
    if (ep->peer_closed) break;
    poll(sink);
  }
  if (!sent_once) {
    ep->flow().close(-1);
    flush(ep);
  }
}

Result<std::string> DpdkDevice::local_address() {
  PeerAddress me;
  me.mode = dopts_.mode;
  me.mac = ports_.empty() ? Mac{} : ports_[0]->mac();
  me.ip = ip_;
  me.udp_port = dopts_.udp_port;
  me.pid = static_cast<uint32_t>(::getpid());
  me.shares_memory = shares_memory_;
  std::memcpy(me.nonce, nonce_, sizeof(nonce_));
  me.max_payload = max_payload_;
  me.auth = dopts_.auth;
  me.host_id = host_id_;
  return format_address(me);
}

// memif: one port per pair; the lower rank is the server of the pair's socket.
// On the link to rank 0, when the client's EAL memory is shareable (init),
// the client runs in zero-copy mode: the server's PMD copies each frame straight into the client's mbufs,
// and the client's frames leave from its own mbufs without memif's copy. Its
// ring then has kMemifZeroCopyRingLog2 slots: the mbufs in flight stay in
// the cores' caches (1024 slots of 9 KiB, memif's default, do not; at 64 KiB
// messages they cost a fifth of the goodput, docs/benchmarks.md). Both ends
// know the client's flag from its address, so both pass the same ring size.
Result<Port*> DpdkDevice::port_for(int peer, bool peer_shares) {
  if (dopts_.mode == "port") return ports_[0].get();
  int lo = std::min(opts_.rank, peer), hi = std::max(opts_.rank, peer);
  std::string sock = dopts_.memif_dir + "/grex-" + opts_.job_id + "-" + std::to_string(lo) + "-" +
                     std::to_string(hi) + ".sock";
  uint32_t bsize = (static_cast<uint32_t>(dopts_.mtu) + kEthHeaderBytes + 1023) & ~1023u;
  PortOptions po;
  // A process may open several devices (grex-perf -q): vdev names must differ.
  const std::string suffix = instance_ == 0 ? "" : "_d" + std::to_string(instance_);
  const bool server = opts_.rank == lo;
  const bool zero_copy = lo == 0 && (server ? peer_shares : shares_memory_);
  // The socket is abstract (no file, no permissions): anyone on this host's
  // network namespace could connect first. memif's secret (24 characters at
  // most) keys the pair's link from the job key, so only the peer gets in.
  uint8_t secret[12];
  if (!wire::hkdf_sha256(job_key_.data(), job_key_.size(), nullptr, 0,
                         "grex memif secret " + std::to_string(lo) + "-" + std::to_string(hi), secret, sizeof(secret)))
    return Error(Errc::kInternal, "cannot derive the memif secret (libcrypto)").rank(opts_.rank).device("dpdk");
  po.devargs = "net_memif" + std::to_string(peer) + suffix + ",role=" + (server ? "server" : "client") +
               ",socket=" + sock + ",id=0,bsize=" + std::to_string(bsize) + ",secret=" + wire::to_hex(secret, sizeof(secret));
  if (zero_copy) {
    po.devargs += ",rsize=" + std::to_string(kMemifZeroCopyRingLog2);
    if (!server) po.devargs += ",zero-copy=yes";
  }
  po.mtu = dopts_.mtu;
  po.mbufs = dopts_.mbufs;
  // A client that reaches the server before the server's port has started is
  // turned away ("ID not found") and memif does not retry; its socket is
  // abstract, so there is no file to wait for. The server therefore drops a
  // marker file once its port runs, and the client waits for it.
  const std::string ready = sock.substr(0, sock.size() - 5) + ".ready";
  Deadline dl = Deadline::after_ms(opts_.connect_timeout_ms);
  if (opts_.rank != lo) {
    struct stat st;
    while (::stat(ready.c_str(), &st) != 0) {
      if (dl.expired())
        return Error(Errc::kTimeout, "memif server of rank " + std::to_string(peer) + " never became ready (" +
                                         ready + ")")
            .rank(opts_.rank)
            .peer(peer)
            .device("dpdk")
            .hint("is rank " + std::to_string(peer) + " running with the dpdk backend?");
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  } else {
    ::unlink(ready.c_str());  // a leftover from a crashed job
  }
  auto p = Port::open(po);
  if (!p) return std::move(p).error().rank(opts_.rank).peer(peer).device("dpdk");
  std::unique_ptr<Port> port = std::move(*p);
  if (opts_.rank == lo) {
    if (FILE* f = std::fopen(ready.c_str(), "w")) std::fclose(f);
    memif_markers_.push_back(ready);
  }
  ports_.push_back(std::move(port));
  port_peer_.push_back(peer);
  port_dead_.push_back(0);
  txq_.emplace_back();
  return ports_.back().get();
}

Result<std::unique_ptr<Endpoint>> DpdkDevice::connect(int peer, std::string_view address) {
  auto err = [&](Errc c, std::string m) { return Error(c, std::move(m)).rank(opts_.rank).peer(peer).device("dpdk"); };
  if (peer < 0 || peer >= opts_.world_size || peer == opts_.rank)
    return err(Errc::kInvalidArgument, "cannot connect to rank " + std::to_string(peer));
  PeerAddress pa;
  const std::string a(address);
  if (!parse_address(address, &pa)) return err(Errc::kProtocol, "'" + a + "' is not a dpdk address");
  if (pa.mode != dopts_.mode)
    return err(Errc::kMismatch, "peer runs dpdk mode " + pa.mode + ", this rank " + dopts_.mode)
        .hint("set the same GREX_DPDK_MODE on every rank");
  if (pa.auth != dopts_.auth)
    return err(Errc::kMismatch, std::string("peer's wire authentication is ") + wire::auth_mode_name(pa.auth) +
                                    ", this rank's " + wire::auth_mode_name(dopts_.auth))
        .hint("set the same GREX_WIRE_AUTH and GREX_WIRE_CRYPT on every rank");
  const uint32_t peer_payload = pa.max_payload;
  const uint8_t* peer_nonce = pa.nonce;
  if (dopts_.mode == "memif" && pa.host_id != host_id_)
    return err(Errc::kNotSupported, "memif connects ranks of one host only")
        .hint("across hosts use GREX_DPDK_MODE=port with a NIC or af_xdp port");
  FrameAddr fa;
  fa.src_ip = ip_;
  fa.src_port = dopts_.udp_port;
  fa.dst_ip = pa.ip;
  fa.dst_port = pa.udp_port;
  // Behind a router, every peer's frames go to the router and come from it
  // (from_peer() checks the source MAC against dst_mac).
  fa.dst_mac = dopts_.via_gateway ? dopts_.gateway_mac : pa.mac;
  Port* port = GREX_TRY(port_for(peer, pa.shares_memory));
  fa.src_mac = port->mac();
  if (dopts_.mode == "memif") fa.dst_mac = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};  // point to point
  // Registrations made before the first port existed get their EAL mapping now.
  for (DpdkRegion* r : regions_)
    if (r != nullptr) GREX_TRY(r->register_with_eal(port->id()));
  // Both ends segment at the smaller payload: a receiver checks each
  // packet's offset against its PSN (reliable_rx.cc), so both must agree.
  reliable::Config cfg = flow_cfg_;
  cfg.max_payload = std::min(cfg.max_payload, peer_payload);
  wire::DirectionKeys tx = wire::derive_direction(job_key_, "dpdk", nonce_, peer_nonce, opts_.rank, peer, dopts_.auth);
  wire::DirectionKeys rx = wire::derive_direction(job_key_, "dpdk", peer_nonce, nonce_, peer, opts_.rank, dopts_.auth);
  if (dopts_.flow_id_bits < 32) {  // both ends keep the same bits; ids that collide are told apart by source
    const uint32_t keep = (1u << dopts_.flow_id_bits) - 1;
    tx.flow_id = (tx.flow_id & keep) | 1;
    rx.flow_id = (rx.flow_id & keep) | 1;
  }
  if (tx.flow_id == 0 || rx.flow_id == 0) return err(Errc::kInternal, "cannot derive the wire keys (libcrypto)");
  auto ep = std::make_unique<DpdkEndpoint>(this, peer, port, fa, cfg, tx, rx);
  ep->paths().reset(dopts_.paths, dopts_.reps, flow_cfg_.span != 0 ? flow_cfg_.span : 4 * flow_cfg_.window,
                    ep->tx_flow_id());
  if (dopts_.path_cc)
    ep->paths().use_path_cc(flow_cfg_.cc, flow_cfg_.cc_options, flow_cfg_.cc_path(), flow_cfg_.pace_min_burst(),
                            flow_cfg_.pace_burst_ns);
  if (!ep->sealer().ready() || !ep->opener().ready()) return err(Errc::kInternal, "cannot key AES-GCM (libcrypto)");
  by_rank_[static_cast<size_t>(peer)] = ep.get();
  by_flow_.emplace(rx.flow_id, ep.get());
  if (auto h = handshake(ep.get()); !h) {
    by_rank_[static_cast<size_t>(peer)] = nullptr;
    remove_flow(rx.flow_id, ep.get());
    return std::move(h).error();
  }
  GREX_DEBUG(kSubsys, "connected to %s", ep->describe_peer().c_str());
  for (const auto& m : memif_markers_) ::unlink(m.c_str());  // the client is in: nothing left behind
  memif_markers_.clear();
  return std::unique_ptr<Endpoint>(std::move(ep));
}

// CONNECT until CONNECT_ACK: proves the path works both ways before any data.
Result<void> DpdkDevice::handshake(DpdkEndpoint* ep) {
  Deadline dl = Deadline::after_ms(opts_.connect_timeout_ms);
  uint64_t next_ns = 0;
  Completion sink[16];
  while (!ep->connected) {
    uint64_t now = now_ns();
    if (now >= next_ns) {
      wire::Header h;
      h.type = wire::Type::kConnect;
      h.offset = static_cast<uint64_t>(opts_.rank);
      send_ctrl(ep, h);
      flush_tx();
      next_ns = now + 10'000'000;
    }
    poll(sink);  // also answers the peer's CONNECT
    if (dl.expired())
      return Error(Errc::kTimeout, "no CONNECT_ACK from " + ep->describe_peer() + " within " +
                                       std::to_string(opts_.connect_timeout_ms) + " ms")
          .rank(opts_.rank)
          .peer(ep->peer())
          .device("dpdk")
          .hint(ep->port()->link_up() ? "the link is up: is the peer connecting to this rank too (it answers once it "
                                        "has), with the same UDP port, mode and job key?"
                                      : "the link is down: is the peer running with this job's key (memif: its socket and secret), "
                                        "or the interface up?");
    if (!ep->port()->link_up()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return ok();
}

void DpdkDevice::remove_flow(uint32_t id, DpdkEndpoint* ep) noexcept {
  for (auto [it, end] = by_flow_.equal_range(id); it != end; ++it)
    if (it->second == ep) {
      by_flow_.erase(it);
      return;
    }
}

void DpdkDevice::remove_endpoint(DpdkEndpoint* ep) noexcept {
  for (auto& e : by_rank_)
    if (e == ep) e = nullptr;
  remove_flow(ep->rx_flow_id(), ep);
}

Result<std::unique_ptr<MemoryRegion>> DpdkDevice::do_register(void* addr, size_t length, MemoryDomain domain) {
  if (domain != MemoryDomain::kHost)
    return Error(Errc::kNotSupported, "dpdk registers host memory only, not GPU memory")
        .device("dpdk")
        .hint("GPU memory as DPDK external memory is not built yet (docs/gpudirect.md); copy to host memory first");
  // A random rkey, unique on this device: a peer cannot name a region it was not told of.
  uint32_t rkey = 0;
  while (rkey == 0 || by_rkey_.count(rkey) != 0)
    if (!wire::random_bytes(reinterpret_cast<uint8_t*>(&rkey), sizeof(rkey)))
      return Error(Errc::kInternal, "no random bytes for an rkey (libcrypto)").device("dpdk");
  auto r = std::make_unique<DpdkRegion>(this, addr, length, next_region_id_++, rkey);
  if (!ports_.empty()) GREX_TRY(r->register_with_eal(ports_[0]->id()));
  if (regions_.size() < r->id()) regions_.resize(r->id(), nullptr);
  regions_[r->id() - 1] = r.get();
  by_rkey_[rkey] = r.get();
  return std::unique_ptr<MemoryRegion>(std::move(r));
}

void DpdkDevice::forget_region(uint32_t id) noexcept {
  if (id >= 1 && id <= regions_.size() && regions_[id - 1] != nullptr) {
    by_rkey_.erase(regions_[id - 1]->rkey());
    regions_[id - 1] = nullptr;
  }
}

uint8_t* DpdkDevice::resolve(uint32_t rkey, uint64_t offset, uint64_t len) noexcept {
  auto it = by_rkey_.find(rkey);
  if (it == by_rkey_.end()) return nullptr;
  DpdkRegion* r = it->second;
  if (!r->holds(offset, len)) return nullptr;
  return static_cast<uint8_t*>(r->addr()) + offset;
}

std::vector<std::pair<std::string, uint64_t>> DpdkDevice::counters() const {
  std::vector<std::pair<std::string, uint64_t>> c = {
      {"rx_packets", stats.rx_packets.get()},         {"tx_packets", stats.tx_packets.get()},
      {"rx_bad_frame", stats.rx_bad_frame.get()},     {"rx_bad_header", stats.rx_bad_header.get()},
      {"rx_unknown_flow", stats.rx_unknown_flow.get()}, {"rx_bad_source", stats.rx_bad_source.get()},
      {"rx_auth_failed", stats.rx_auth_failed.get()}, {"rx_replayed", stats.rx_replayed.get()},
      {"rx_authenticated", stats.rx_authenticated.get()}, {"rx_untagged", stats.rx_untagged.get()},
      {"tx_ring_full", stats.tx_ring_full.get()},
      {"tx_no_mbuf", stats.tx_no_mbuf.get()},         {"zero_copy_tx", stats.zero_copy_tx.get()},
      {"copied_tx", stats.copied_tx.get()},           {"faults_dropped", stats.faults_dropped.get()},
      {"faults_duplicated", stats.faults_duplicated.get()}, {"faults_reordered", stats.faults_reordered.get()},
      {"faults_corrupted", stats.faults_corrupted.get()}, {"faults_garbage", stats.faults_garbage.get()}};
  reliable::FlowStats t;
  for (DpdkEndpoint* ep : by_rank_) {
    if (ep == nullptr) continue;
    const auto& s = ep->flow().stats();
    t.data_sent += s.data_sent;
    t.retransmits += s.retransmits;
    t.duplicates += s.duplicates;
    t.timeouts += s.timeouts;
    t.spurious_timeouts += s.spurious_timeouts;
    t.tail_probes += s.tail_probes;
    t.out_of_window += s.out_of_window;
    t.bad_placement += s.bad_placement;
    t.rtt_samples += s.rtt_samples;
    t.last_rtt_ns = s.last_rtt_ns;
    t.probes_sent += s.probes_sent;
    t.probe_timeouts += s.probe_timeouts;
    t.paced_waits += s.paced_waits;
    if (s.cc_rate_bps > 0 && (t.cc_rate_bps == 0 || s.cc_rate_bps < t.cc_rate_bps)) t.cc_rate_bps = s.cc_rate_bps;
  }
  c.insert(c.end(), {{"data_sent", t.data_sent},         {"retransmits", t.retransmits},
                     {"duplicates", t.duplicates},       {"rto_timeouts", t.timeouts},
                     {"rto_spurious", t.spurious_timeouts}, {"tail_probes", t.tail_probes},
                     {"out_of_window", t.out_of_window}, {"bad_placement", t.bad_placement},
                     {"rtt_samples", t.rtt_samples},     {"last_rtt_ns", t.last_rtt_ns},
                     {"probes_sent", t.probes_sent},     {"probes_lost", t.probe_timeouts},
                     {"paced_waits", t.paced_waits},
                     {"cc_min_rate_kbps", static_cast<uint64_t>(t.cc_rate_bps / 1e3)},
                     {"line_rate_mbps", static_cast<uint64_t>(flow_cfg_.line_rate_bps / 1e6)}});
  // Per flow ("peer.<rank>.<name>"): what the congestion controller of each flow sees.
  for (DpdkEndpoint* ep : by_rank_) {
    if (ep == nullptr) continue;
    const auto& s = ep->flow().stats();
    const std::string p = "peer." + std::to_string(ep->peer()) + ".";
    if (ep->paths().paths() > 1)
      c.insert(c.end(), {{p + "paths_explored", ep->paths().explored()}, {p + "paths_recycled", ep->paths().recycled()},
                         {p + "paths_reprobed", ep->paths().reprobes()}});
    for (uint32_t i = 0; ep->paths().paths() > 1 && i < ep->paths().paths(); ++i) {
      const std::string n = std::to_string(i);
      c.insert(c.end(), {{p + "tx_path." + n, ep->paths().sent_on(i)}, {p + "resent_path." + n, ep->paths().resent_on(i)},
                         {p + "rtt_path_ns." + n, ep->paths().srtt_ns(i)}, {p + "slow_path." + n, ep->paths().slow_marks(i)}});
      if (ep->paths().path_cc())
        c.push_back({p + "rate_path_kbps." + n, static_cast<uint64_t>(ep->paths().path_rate_bps(i) / 1e3)});
    }
    c.insert(c.end(), {{p + "rx_paths", static_cast<uint64_t>(std::popcount(ep->rx_paths()))},
                       {p + "data_sent", s.data_sent}, {p + "bytes_sent", s.bytes_sent}, {p + "retransmits", s.retransmits},
                       {p + "rtt_samples", s.rtt_samples}, {p + "last_rtt_ns", s.last_rtt_ns}, {p + "rev_queue_ns", s.rev_queue_ns},
                       {p + "ack_rtt_samples", s.ack_rtt_samples}, {p + "rtt_samples_stalled", s.rtt_samples_stalled},
                       {p + "credits_granted", s.credits_granted}, {p + "credit_waits", s.credit_waits}, {p + "reorder_tolerance", s.reorder_tolerance},
                       {p + "probes_sent", s.probes_sent}, {p + "probes_lost", s.probe_timeouts},
                       {p + "paced_waits", s.paced_waits},
                       {p + "cc_rate_kbps", static_cast<uint64_t>(s.cc_rate_bps / 1e3)}});
  }
  if (bn_.ns_per_byte > 0)
    c.insert(c.end(), {{"bn_packets", bn_.packets},
                       {"bn_drops", bn_.drops},
                       {"bn_queue_max_kb", bn_.max_bytes / 1024},
                       {"bn_delay_p50_us", bottleneck_delay_percentile_us(0.5)},
                       {"bn_delay_p99_us", bottleneck_delay_percentile_us(0.99)}});
  return c;
}

}  // namespace grex::dpdk
