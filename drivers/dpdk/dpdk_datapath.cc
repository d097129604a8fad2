// SPDX-License-Identifier: Apache-2.0
// DPDK driver fast path: posting into flows, RX demultiplexing and validation,
// TX framing with zero-copy payload segments, fault injection, completions.
#include <rte_mbuf.h>

#include <cstring>

#include "core/clock.h"
#include "core/log.h"
#include "drivers/dpdk/dpdk_device.h"
#include "drivers/dpdk/dpdk_guard.h"

namespace grex::dpdk {
namespace {
constexpr size_t kFrameHeaderBytes = kHeadersBytes + wire::kHeaderBytes;
constexpr uint16_t kRxBurst = 32;
constexpr int kRxRounds = 8;
constexpr size_t kTxQueueMax = 4096;
}  // namespace

// ---------------------------------------------------------------- posting

template <class Req, class Post>
static PostResult post_all(reliable::Flow& flow, std::span<const Req> reqs, Post post) noexcept {
  size_t n = 0;
  for (const auto& r : reqs) {
    if (!(flow.*post)(r)) break;
    ++n;
  }
  return {n, n < reqs.size() && flow.failed() ? Errc::kPeerFailed : Errc::kOk};
}

PostResult DpdkEndpoint::post_send(std::span<const SendRequest> reqs) noexcept {
  return post_all(flow_, reqs, &reliable::Flow::post_send);
}
PostResult DpdkEndpoint::post_recv(std::span<const RecvRequest> reqs) noexcept {
  return post_all(flow_, reqs, &reliable::Flow::post_recv);
}
PostResult DpdkEndpoint::post_write(std::span<const WriteRequest> reqs) noexcept {
  return post_all(flow_, reqs, &reliable::Flow::post_write);
}

// ---------------------------------------------------------------- receive

bool DpdkDevice::rx(size_t pi, uint64_t now) noexcept {
  Port* port = ports_[pi].get();
  rte_mbuf* bufs[kRxBurst * kRxRounds];
  size_t held = 0;  // read into the emulated bottleneck's part of bufs
  bool dry = false;
  for (int round = 0; round < kRxRounds && !dry; ++round) {
    rte_mbuf** at = bufs + held;
    uint16_t n = 0;
    if (port_peer_[pi] < 0) {
      n = port->rx_burst(at, kRxBurst);
    } else if (!guarded_burst([&] { n = port->rx_burst(at, kRxBurst); })) {
      GREX_WARN("dpdk", "%s faulted in rx_burst while its peer went away; abandoning the port", port->name().c_str());
      mark_dead(pi);
      to_bottleneck(pi, bufs, held, now);  // dropped as they leave it (port dead)
      return true;
    }
    stats.rx_packets.add(n);
    dry = n < kRxBurst;
    if (bn_.ns_per_byte > 0) {
      held += n;
      continue;
    }
    for (uint16_t i = 0; i < n; ++i) deliver(port, at[i], now);
  }
  to_bottleneck(pi, bufs, held, now);
  return dry;
}

// Into the emulated bottleneck, tail drop when its queue is full. The link
// it emulates lies before this host's ring and kept carrying packets while
// the host did not read: what this poll reads arrived after the previous
// poll's read (or a full ring held it back since before), and is taken to
// have arrived then. Taken to arrive at `now`, a spell unscheduled became a
// queue of all the senders sent meanwhile, though they sent no faster than
// the link, and RTTCC cut for it: with 3 busy loops beside a 3-to-1 incast
// on 2 cores, 38-81 s against 0.37-0.66 s uncontrolled. (Spread evenly over
// the spell instead, the later ones leave the queue at later polls, whose
// gaps do not cover their wait: RTTCC came down as before.) The queue a
// packet meets is the link's backlog at its arrival.
void DpdkDevice::to_bottleneck(size_t pi, rte_mbuf** bufs, size_t n, uint64_t now) noexcept {
  const uint64_t arrive = bn_.read_ns != 0 && bn_.read_ns < now ? bn_.read_ns : now;
  for (size_t i = 0; i < n; ++i) {
    rte_mbuf* m = bufs[i];
    const uint64_t len = m->pkt_len;
    const uint64_t backlog =
        bn_.busy_until_ns > arrive ? static_cast<uint64_t>(static_cast<double>(bn_.busy_until_ns - arrive) / bn_.ns_per_byte) : 0;
    ++bn_.packets;
    if (backlog + len > bn_.cap_bytes || bn_.n == bn_.ring.size()) {
      ++bn_.drops;
      rte_pktmbuf_free(m);
      continue;
    }
    const uint64_t start = std::max(arrive, bn_.busy_until_ns);
    bn_.busy_until_ns = start + static_cast<uint64_t>(static_cast<double>(len) * bn_.ns_per_byte);
    bn_.ring[(bn_.head + bn_.n++) % bn_.ring.size()] = Bottleneck::Pkt{m, static_cast<uint32_t>(pi), arrive, bn_.busy_until_ns};
    bn_.max_bytes = std::max(bn_.max_bytes, backlog + len);
  }
}

void DpdkDevice::deliver(Port* port, rte_mbuf* m, uint64_t now) noexcept {
  if (m->nb_segs == 1) {
    handle(port, rte_pktmbuf_mtod(m, uint8_t*), m->data_len, now);
  } else if (m->pkt_len <= linear_.size()) {
    // Contiguous or copied into linear_: writable either way (decryption is in place).
    auto* p = static_cast<uint8_t*>(const_cast<void*>(rte_pktmbuf_read(m, 0, m->pkt_len, linear_.data())));
    handle(port, p, m->pkt_len, now);
  } else {
    stats.rx_bad_frame.add();
  }
  rte_pktmbuf_free(m);
}

// Frames whose turn at the emulated bottleneck has come go up the stack; the
// delay each one saw is its departure minus its arrival (queue / rate).
void DpdkDevice::drain_bottleneck(uint64_t now) noexcept {
  while (bn_.n > 0) {
    Bottleneck::Pkt& p = bn_.ring[bn_.head];
    if (p.depart_ns > now) break;
    bn_.head = (bn_.head + 1) % bn_.ring.size();
    --bn_.n;
    const uint64_t us = (p.depart_ns - p.arrive_ns) / 1000;
    ++bn_.delay_hist[std::min<uint64_t>(us, bn_.delay_hist.size() - 1)];
    if (port_dead_[p.port])
      rte_pktmbuf_free(p.m);
    else
      deliver(ports_[p.port].get(), p.m, now);
  }
}

uint64_t DpdkDevice::bottleneck_delay_percentile_us(double q) const noexcept {
  uint64_t total = 0;
  for (uint32_t c : bn_.delay_hist) total += c;
  if (total == 0) return 0;
  const auto want = static_cast<uint64_t>(q * static_cast<double>(total));
  uint64_t seen = 0;
  for (size_t i = 0; i < bn_.delay_hist.size(); ++i) {
    seen += bn_.delay_hist[i];
    if (seen > want) return i;
  }
  return bn_.delay_hist.size() - 1;
}

// Every field is checked before use; anything malformed is counted and dropped.
// A packet names its flow by the id only the peer could derive (wire_auth.h);
// it must come from the peer's address and carry the peer's tag.
void DpdkDevice::handle(Port* port, uint8_t* frame, size_t len, uint64_t now) noexcept {
  Parsed p;
  if (ParseError e = frame::parse(frame, len, dopts_.udp_port, &p); e != ParseError::kOk) {
    stats.rx_bad_frame.add();
    GREX_TRACE("dpdk", "%s: dropped a %zu-byte frame: %s", port->name().c_str(), len, frame::parse_error_name(e));
    return;
  }
  wire::Header h;
  // A tagged packet's tag (admit()) stands in for its CRC.
  wire::Reject r = wire::decode_fields(p.payload, p.payload_len, max_payload_, &h);
  if (r == wire::Reject::kNone && !wire::tag_replaces_crc(h, dopts_.auth) && !wire::crc_matches(p.payload, h))
    r = wire::Reject::kBadCrc;
  if (r != wire::Reject::kNone) {
    stats.rx_bad_header.add();
    GREX_TRACE("dpdk", "%s: dropped a packet: %s", port->name().c_str(), wire::reject_name(r));
    return;
  }
  DpdkEndpoint* ep = nullptr;
  for (auto [it, end] = by_flow_.equal_range(h.flow); it != end; ++it) {
    DpdkEndpoint* e = it->second;
    if (e->port() != port) continue;
    ep = e;  // the one whose peer sent it, if ids collide; admit() refuses any other source
    if (from_peer(e, p)) break;
  }
  if (ep == nullptr) {
    stats.rx_unknown_flow.add();
    GREX_TRACE("dpdk", "%s: packet type %d for unknown flow %u", port->name().c_str(), static_cast<int>(h.type), h.flow);
    return;
  }
  bool authentic = false;
  if (!admit(ep, p, h, &authentic)) return;
  if (h.type == wire::Type::kConnect) {
    wire::Header a;
    a.type = wire::Type::kConnectAck;
    a.offset = static_cast<uint64_t>(opts_.rank);
    send_ctrl(ep, a);
    return;
  }
  if (h.type == wire::Type::kConnectAck) {
    ep->connected = true;
    return;
  }
  if (h.type == wire::Type::kClose) ep->peer_closed = true;
  // Every packet of these types carries the peer's cumulative ACK (data too: adverts).
  // An ACK's echo (psn, send time) is an RTT sample of the path that packet took.
  // Less the packet's wait at the peer before the ACK left (the receiver's
  // own batching is no path's queue).
  if (h.type == wire::Type::kAck && h.timestamp != 0 && h.timestamp <= now && h.tag < now - h.timestamp) {
    ep->paths().rtt_sample(h.psn, now - h.timestamp - h.tag, now, rx_gap_ns_);
    if (ep->paths().path_cc()) ep->flow().pace_at(ep->paths().rate());
  }
  // An untagged data packet's ACK fields are the one thing in it a stranger
  // could use to complete sends: they count where a tag vouched for them
  // (or where nothing is authenticated at all).
  const bool ack_trusted = authentic || dopts_.auth == wire::AuthMode::kOff;
  if (h.type == wire::Type::kAck || h.type == wire::Type::kNack || (h.type == wire::Type::kData && ack_trusted))
    ep->paths().acked(h.ack);
  ep->flow().on_packet(h, p.payload + wire::kHeaderBytes, now, rx_gap_ns_, ack_trusted);
}

bool DpdkDevice::from_peer(const DpdkEndpoint* ep, const Parsed& p) const noexcept {
  const FrameAddr& a = ep->addr();
  // memif links are point to point (the port is the peer's); a shared port
  // must see the peer's MAC too.
  // With GREX_DPDK_PATHS > 1 the peer sprays its data over source ports
  // [its port, its port + paths): every rank of a job sets the same paths.
  const uint16_t path = static_cast<uint16_t>(p.addr.src_port - a.dst_port);
  return p.addr.src_ip == a.dst_ip && path < dopts_.paths && (!port_mode_ || p.addr.src_mac == a.dst_mac);
}

bool DpdkDevice::admit(DpdkEndpoint* ep, const Parsed& p, const wire::Header& h, bool* authentic) noexcept {
  if (!from_peer(ep, p)) {
    stats.rx_bad_source.add();
    return false;
  }
  ep->rx_paths() |= uint64_t{1} << static_cast<uint16_t>(p.addr.src_port - ep->addr().dst_port);
  if (dopts_.auth == wire::AuthMode::kOff) return true;
  if (!wire::packet_tagged(h, dopts_.auth)) {  // control: a data packet, by CRC alone
    stats.rx_untagged.add();
    return true;
  }
  auto* hdr = const_cast<uint8_t*>(p.payload);  // inside the frame handle() was given, writable
  uint8_t* payload = hdr + wire::kHeaderBytes;
  const bool covers = wire::tag_covers_payload(h, dopts_.auth);
  if (!ep->opener().open(h.seq, hdr, wire::kTaggedHeaderBytes, covers ? payload : nullptr, covers ? h.payload_len : 0,
                         wire::payload_encrypted(h, dopts_.auth) ? payload : nullptr, hdr + wire::kTagOffset)) {
    stats.rx_auth_failed.add();
    GREX_TRACE("dpdk", "%s: packet type %d failed its tag", ep->describe_peer().c_str(), static_cast<int>(h.type));
    return false;
  }
  // Only after the tag: a stranger must not move the window.
  if (!ep->replay().accept(h.seq)) {
    stats.rx_replayed.add();
    return false;
  }
  stats.rx_authenticated.add();
  *authentic = true;
  return true;
}

bool DpdkDevice::seal(DpdkEndpoint* ep, uint8_t* hdr, const wire::Header& h, const uint8_t* payload,
                      uint8_t* enc) noexcept {
  if (!wire::packet_tagged(h, dopts_.auth)) return true;
  const bool covers = wire::tag_covers_payload(h, dopts_.auth);
  return ep->sealer().seal(h.seq, hdr, wire::kTaggedHeaderBytes, covers ? payload : nullptr,
                           covers ? h.payload_len : 0, enc, hdr + wire::kTagOffset);
}

// ---------------------------------------------------------------- transmit

std::vector<rte_mbuf*>* DpdkDevice::txq_of(const Port* port) noexcept {
  for (size_t i = 0; i < ports_.size(); ++i)
    if (ports_[i].get() == port) return &txq_[i];
  return nullptr;
}

void DpdkDevice::enqueue(Port* port, rte_mbuf* m) noexcept {
  if (std::vector<rte_mbuf*>* q = txq_of(port); q != nullptr) {
    if (q->size() >= kTxQueueMax) {  // the PMD is not keeping up: drop; the protocol repairs
      stats.tx_ring_full.add();
      rte_pktmbuf_free(m);
    } else {
      q->push_back(m);
    }
  }
  // Packets held back for reordering go out after `countdown` later ones.
  for (size_t i = 0; i < held_.size();) {
    if (--held_[i].countdown == 0) {
      Held h = held_[i];
      held_.erase(held_.begin() + static_cast<long>(i));
      enqueue(h.port, h.m);
    } else {
      ++i;
    }
  }
}

void DpdkDevice::send_ctrl(DpdkEndpoint* ep, wire::Header h) noexcept {
  Port* port = ep->port();
  h.flow = ep->tx_flow_id();
  h.seq = ep->next_seq();
  uint8_t hdr[kFrameHeaderBytes];
  frame::write_headers(hdr, ep->addr(), wire::kHeaderBytes, !port->tx_ip_cksum());
  wire::encode(h, hdr + kHeadersBytes, nullptr, !wire::tag_replaces_crc(h, dopts_.auth));
  seal(ep, hdr + kHeadersBytes, h, nullptr, nullptr);
  rte_mbuf* m = build_packet(port->pool(), hdr, kFrameHeaderBytes, nullptr, 0, nullptr, false);
  if (m == nullptr) {
    stats.tx_no_mbuf.add();
    return;
  }
  port->set_tx_cksum_flags(m);
  enqueue(port, m);
}

void DpdkDevice::transmit(DpdkEndpoint* ep, const reliable::TxPacket& p) noexcept {
  Port* port = ep->port();
  const uint32_t len = p.hdr.payload_len;
  wire::Header h = p.hdr;
  h.seq = ep->next_seq();  // every packet, retransmissions too: a fresh nonce
  uint8_t hdr[kFrameHeaderBytes];
  // Spraying (GREX_DPDK_PATHS): each packet's UDP source port is the entropy
  // an ECMP hash sees, so consecutive packets may take different paths.
  FrameAddr a = ep->addr();
  const uint32_t path =
      h.type == wire::Type::kData ? ep->paths().choose(h.psn, h.timestamp, wire::kHeaderBytes + len, len) : 0;
  // With a controller per path, the flow's pace is their sum (a path's rate
  // also moves as it sends: slow start).
  if (h.type == wire::Type::kData && ep->paths().path_cc() && (h.psn & 7) == 0) ep->flow().pace_at(ep->paths().rate());
  a.src_port = static_cast<uint16_t>(a.src_port + path);
  frame::write_headers(hdr, a, wire::kHeaderBytes + len, !port->tx_ip_cksum());
  wire::encode(h, hdr + kHeadersBytes, p.payload, !wire::tag_replaces_crc(h, dopts_.auth));
  // Encrypted payloads are sealed into the mbuf's copy (below); the rest here,
  // reading the payload where it lies (zero copy stays zero copy).
  const bool encrypt = wire::payload_encrypted(h, dopts_.auth);
  if (!encrypt) seal(ep, hdr + kHeadersBytes, h, p.payload, nullptr);
  FaultDecision d = faults_.next(static_cast<uint32_t>(kFrameHeaderBytes + len));
  if (d.garbage) send_garbage(port, d, hdr);
  if (d.drop || faults_.drop_on_path(path)) {
    stats.faults_dropped.add();
    return;
  }
  const auto* region = static_cast<const DpdkRegion*>(p.region);
  rte_mbuf_ext_shared_info* shinfo = region != nullptr ? region->shinfo() : nullptr;
  // Zero copy when the port takes extbufs (it chains mbufs, and is not a
  // memif client in zero-copy mode) and the memory is known to EAL; a packet
  // to be corrupted is always copied (the user's buffer stays intact).
  bool zero_copy = len > 0 && port->tx_extbuf() && shinfo != nullptr && !d.corrupt && !encrypt;
  auto build = [&]() -> rte_mbuf* {
    rte_mbuf* b = build_packet(port->pool(), hdr, kFrameHeaderBytes, const_cast<uint8_t*>(p.payload),
                               static_cast<uint16_t>(len), shinfo, zero_copy);
    if (b != nullptr && encrypt) {  // copied behind the header in one segment: encrypt it there
      uint8_t* g = rte_pktmbuf_mtod(b, uint8_t*) + kHeadersBytes;
      if (!seal(ep, g, h, g + wire::kHeaderBytes, g + wire::kHeaderBytes)) {
        rte_pktmbuf_free(b);
        return nullptr;
      }
    }
    return b;
  };
  rte_mbuf* m = build();
  if (m == nullptr) {
    stats.tx_no_mbuf.add();  // the flow retransmits it later
    return;
  }
  (zero_copy ? stats.zero_copy_tx : stats.copied_tx).add();
  if (d.corrupt) {
    uint32_t bit = d.corrupt_bit % (8u * m->data_len);
    rte_pktmbuf_mtod(m, uint8_t*)[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    stats.faults_corrupted.add();
  }
  port->set_tx_cksum_flags(m);
  if (d.duplicate) {
    if (rte_mbuf* m2 = build()) {
      port->set_tx_cksum_flags(m2);
      enqueue(port, m2);
      stats.faults_duplicated.add();
    }
  }
  if (d.delay > 0) {
    held_.push_back({m, d.delay, port});
    stats.faults_reordered.add();
  } else {
    enqueue(port, m);
  }
}

// Junk on the wire for robustness tests: random bytes (sometimes behind a
// valid Ethernet/IP/UDP header, so the grex parser sees them), or a prefix of
// the real frame (a truncated datagram).
void DpdkDevice::send_garbage(Port* port, const FaultDecision& d, const uint8_t* frame_hdr) noexcept {
  rte_mbuf* m = rte_pktmbuf_alloc(port->pool());
  if (m == nullptr) return;
  uint32_t len = std::min<uint32_t>(d.garbage_len, static_cast<uint32_t>(kFrameHeaderBytes));
  if (!d.garbage_truncated) len = std::max<uint32_t>(d.garbage_len, 1);
  len = std::min<uint32_t>(len, rte_pktmbuf_tailroom(m));
  auto* p = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(len)));
  if (p == nullptr) {
    rte_pktmbuf_free(m);
    return;
  }
  if (d.garbage_truncated) {
    std::memcpy(p, frame_hdr, len);
  } else {
    uint64_t x = d.garbage_seed | 1;
    for (uint32_t i = 0; i < len; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      p[i] = static_cast<uint8_t>(x);
    }
    if ((d.garbage_seed & 2) != 0 && len > kHeadersBytes) {  // valid UDP around random grex bytes
      FrameAddr a;
      std::memcpy(a.dst_mac.data(), frame_hdr, 6);
      std::memcpy(a.src_mac.data(), frame_hdr + 6, 6);
      a.src_ip = ip_;
      a.dst_ip = ip_;
      a.src_port = a.dst_port = dopts_.udp_port;
      frame::write_headers(p, a, len - kHeadersBytes, true);
    }
  }
  stats.faults_garbage.add();
  enqueue(port, m);
}

void DpdkDevice::mark_dead(size_t i) noexcept {
  port_dead_[i] = true;
  if (DpdkEndpoint* ep = by_rank_[static_cast<size_t>(port_peer_[i])]) {
    ep->peer_closed = true;
    ep->flow().fail_all(Status::kPeerGone);
  }
}

bool DpdkDevice::connected_once(size_t i) const noexcept {
  DpdkEndpoint* ep = port_peer_[i] >= 0 ? by_rank_[static_cast<size_t>(port_peer_[i])] : nullptr;
  return ep != nullptr && ep->connected;
}

void DpdkDevice::flush_tx() noexcept {
  for (size_t i = 0; i < ports_.size(); ++i) {
    auto& q = txq_[i];
    if (q.empty()) continue;
    if (!port_dead_[i] && port_peer_[i] >= 0 && !ports_[i]->link_up() && connected_once(i)) mark_dead(i);
    if (port_dead_[i]) {
      for (rte_mbuf* m : q) rte_pktmbuf_free(m);
      q.clear();
      continue;
    }
    uint16_t want = static_cast<uint16_t>(std::min<size_t>(q.size(), UINT16_MAX));
    uint16_t sent = 0;
    if (port_peer_[i] < 0) {
      sent = ports_[i]->tx_burst(q.data(), want);
    } else if (!guarded_burst([&] { sent = ports_[i]->tx_burst(q.data(), want); })) {
      GREX_WARN("dpdk", "%s faulted in tx_burst while its peer went away; abandoning the port",
                ports_[i]->name().c_str());
      mark_dead(i);
      q.clear();  // the PMD may own some of them now: leak rather than double-free
      continue;
    }
    stats.tx_packets.add(sent);
    q.erase(q.begin(), q.begin() + sent);
  }
}

// Receiver credits: the bucket fills at the credit rate (a few packets'
// worth at most while no flow wants grants) and each packet's worth is
// granted to the next flow that wants one, while the flows whose peers are
// sending have fewer than credit_window packets granted and not arrived
// together (a peer that stopped holds its unused grants, and no others'). Grants at the
// rate alone would keep whatever queue the first, unscheduled packets built
// (arrivals would match the drain exactly); the cap lets it drain.
void DpdkDevice::grant_credits(uint64_t now) noexcept {
  if (credit_.bytes_per_ns <= 0) return;
  if (credit_.last_ns != 0) credit_.bytes += static_cast<double>(now - credit_.last_ns) * credit_.bytes_per_ns;
  credit_.last_ns = now;
  credit_.bytes = std::min(credit_.bytes, 8 * credit_.pkt_bytes);
  if (credit_.bytes < credit_.pkt_bytes) return;
  const size_t n = by_rank_.size();
  uint64_t outstanding = 0;
  for (DpdkEndpoint* ep : by_rank_)
    if (ep != nullptr) outstanding += ep->flow().credit_outstanding(now);
  for (size_t idle = 0; credit_.bytes >= credit_.pkt_bytes && idle < n && outstanding < flow_cfg_.credit_window;) {
    credit_.next = credit_.next + 1 < n ? credit_.next + 1 : 0;
    DpdkEndpoint* ep = by_rank_[credit_.next];
    if (ep == nullptr || !ep->flow().wants_credit(now)) {
      ++idle;
      continue;
    }
    ep->flow().grant(1);
    credit_.bytes -= credit_.pkt_bytes;
    ++outstanding;
    idle = 0;
  }
}

// Room for one flow's packets this poll: what keeps the port's software
// queue under tx_backlog_ packets (never less than a couple, so ACKs and probe
// replies still leave). Packets a flow builds are stamped as sent; a deep
// queue behind a full ring would only age them before they reach the wire.
std::span<reliable::TxPacket> DpdkDevice::tx_room(const Port* port) noexcept {
  const std::vector<rte_mbuf*>* q = txq_of(port);
  const size_t queued = q != nullptr ? q->size() : 0;
  const size_t room = queued >= tx_backlog_ ? kTxMinRoom : std::max(kTxMinRoom, tx_backlog_ - queued);
  return std::span<reliable::TxPacket>(txpk_).first(std::min(room, txpk_.size()));
}

void DpdkDevice::flush(DpdkEndpoint* ep) noexcept {
  size_t n = ep->flow().poll_tx(txpk_, now_ns());
  for (size_t i = 0; i < n; ++i) transmit(ep, txpk_[i]);
  for (auto& h : held_) enqueue(h.port, h.m);
  held_.clear();
  flush_tx();
}

size_t DpdkDevice::build_tx(uint64_t now, bool timers) noexcept {
  size_t sent = 0;
  // Flows sharing a port (port mode) share its backlog: start with a
  // different one each pass, so no peer always finds the room taken.
  const size_t nflows = by_rank_.size();
  tx_start_ = tx_start_ + 1 < nflows ? tx_start_ + 1 : 0;
  for (size_t f = 0; f < nflows; ++f) {
    DpdkEndpoint* ep = by_rank_[(tx_start_ + f) % nflows];
    if (ep == nullptr) continue;
    size_t n = ep->flow().poll_tx(tx_room(ep->port()), now, timers);
    for (size_t i = 0; i < n; ++i) transmit(ep, txpk_[i]);
    sent += n;
  }
  return sent;
}

size_t DpdkDevice::poll(std::span<Completion> out) noexcept {
  uint64_t now = now_ns();
  // What was posted since the last poll leaves first: a receive's advert
  // (the sender's credit) would otherwise wait behind up to kRxRounds bursts
  // of data, and with it every send the peer could match to it. No timers
  // yet: after a spell away from polling (a compute phase, a preemption) the
  // ACKs for what we sent may wait in the receive ring, and an RTO now would
  // be spurious (and cut the congestion controller's rate).
  if (build_tx(now, false) > 0) flush_tx();
  // How long the rings went unread: what arrives now may have waited that long.
  rx_gap_ns_ = rx_read_ns_ != 0 ? now - rx_read_ns_ : 0;
  bool drained = true;  // every ring read to its end: the timers may run
  // A memif peer that vanished takes its shared memory with it; the PMD's
  // control thread unmaps it while we might poll. Check the link first and
  // never touch a dead memif port again: its flow fails now (peer gone).
  for (size_t i = 0; i < ports_.size(); ++i) {
    if (port_dead_[i]) continue;
    if (port_peer_[i] >= 0 && !ports_[i]->link_up() && connected_once(i)) {
      mark_dead(i);
      continue;
    }
    drained = rx(i, now) && drained;
  }
  bn_.read_ns = now;
  if (bn_.n > 0) drain_bottleneck(now);
  grant_credits(now);
  // A ring that stays full (a flood from other peers) still lets the timers
  // run every millisecond.
  if (drained) rx_read_ns_ = now;
  const bool timers = drained || now - timers_ns_ > 1'000'000;
  if (timers) timers_ns_ = now;
  size_t sent = build_tx(now, timers);
  if (sent == 0 && !held_.empty()) {  // nothing left to overtake them
    std::vector<Held> h;
    h.swap(held_);
    for (auto& x : h) enqueue(x.port, x.m);
  }
  flush_tx();
  size_t k = 0;
  for (DpdkEndpoint* ep : by_rank_)
    if (ep != nullptr && k < out.size()) k += ep->flow().poll_completions(out.subspan(k));
  return k;
}

}  // namespace grex::dpdk
