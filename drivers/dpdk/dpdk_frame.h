// SPDX-License-Identifier: Apache-2.0
// Ethernet/IPv4/UDP header writing and RX validation in plain C++ (no DPDK headers).
//
// The DPDK driver frames every packet as Ethernet(14) + IPv4(20, no options) +
// UDP(8) + payload. These helpers write and check those 42 bytes; they work on
// raw byte buffers so they can be unit-tested without DPDK. All multi-byte
// fields on the wire are big-endian; the structs here hold host-order values.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace grex::dpdk::frame {

inline constexpr size_t kEthHeaderBytes = 14;
inline constexpr size_t kIpv4HeaderBytes = 20;
inline constexpr size_t kUdpHeaderBytes = 8;
inline constexpr size_t kHeadersBytes = kEthHeaderBytes + kIpv4HeaderBytes + kUdpHeaderBytes;
static_assert(kHeadersBytes == 42, "Ethernet + IPv4 (IHL 5) + UDP is 42 bytes");

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint8_t kDefaultTtl = 64;
/// Largest UDP payload an IPv4 packet can carry (total length is 16 bits).
inline constexpr size_t kMaxUdpPayloadBytes = 0xffff - kIpv4HeaderBytes - kUdpHeaderBytes;

using Mac = std::array<uint8_t, 6>;

/// Addresses and ports of one flow, host byte order.
struct FrameAddr {
  Mac src_mac{};
  Mac dst_mac{};
  uint32_t src_ip = 0;  ///< e.g. 10.0.0.1 is 0x0a000001
  uint32_t dst_ip = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
};

/// Why parse() rejected a frame.
enum class ParseError : uint8_t {
  kOk = 0,
  kShortFrame,      ///< fewer than 42 bytes
  kNotIpv4,         ///< EtherType is not 0x0800 or IP version is not 4
  kBadIhl,          ///< IP header has options (IHL != 5)
  kBadTotalLength,  ///< IP total length < 28 or larger than the frame holds
  kFragment,        ///< MF set or fragment offset != 0
  kBadIpChecksum,   ///< header checksum wrong (only when asked to verify)
  kNotUdp,          ///< IP protocol is not 17
  kBadUdpLength,    ///< UDP length != IP total length - 20
  kWrongPort,       ///< UDP destination port is not the expected one
};

/// A validated frame: the UDP payload and the flow it came from (host order).
struct Parsed {
  const uint8_t* payload = nullptr;
  size_t payload_len = 0;
  FrameAddr addr;
};

namespace detail {
inline void put16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v >> 8); p[1] = uint8_t(v); }
inline void put32(uint8_t* p, uint32_t v) { put16(p, uint16_t(v >> 16)); put16(p + 2, uint16_t(v)); }
inline uint16_t get16(const uint8_t* p) { return uint16_t((p[0] << 8) | p[1]); }
inline uint32_t get32(const uint8_t* p) { return (uint32_t(get16(p)) << 16) | get16(p + 2); }
}  // namespace detail

/// Internet checksum (RFC 1071) of a 20-byte IPv4 header, as written to the
/// wire; same result as rte_ipv4_cksum. A header with a correct checksum
/// field sums to 0.
inline uint16_t ipv4_checksum(const uint8_t* ip_hdr) {
  uint32_t sum = 0;
  for (size_t i = 0; i < kIpv4HeaderBytes; i += 2) sum += detail::get16(ip_hdr + i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

/// Writes the 42 header bytes for `payload_len` bytes of UDP payload into
/// `buf` (which must hold 42 bytes). IP ID 0, DF set, TTL 64, UDP checksum 0
/// (allowed for IPv4). With `sw_ip_cksum` false the IP checksum is left 0 for
/// the NIC to fill (RTE_MBUF_F_TX_IP_CKSUM). Returns false if payload_len is
/// larger than kMaxUdpPayloadBytes (nothing written).
inline bool write_headers(uint8_t* buf, const FrameAddr& a, size_t payload_len, bool sw_ip_cksum = true) {
  if (payload_len > kMaxUdpPayloadBytes) return false;
  using detail::put16;
  using detail::put32;
  for (size_t i = 0; i < 6; ++i) buf[i] = a.dst_mac[i];
  for (size_t i = 0; i < 6; ++i) buf[6 + i] = a.src_mac[i];
  put16(buf + 12, kEtherTypeIpv4);

  uint8_t* ip = buf + kEthHeaderBytes;
  ip[0] = 0x45;  // version 4, IHL 5
  ip[1] = 0;     // DSCP/ECN
  put16(ip + 2, uint16_t(kIpv4HeaderBytes + kUdpHeaderBytes + payload_len));
  put16(ip + 4, 0);       // identification
  put16(ip + 6, 0x4000);  // DF, offset 0
  ip[8] = kDefaultTtl;
  ip[9] = kIpProtoUdp;
  put16(ip + 10, 0);
  put32(ip + 12, a.src_ip);
  put32(ip + 16, a.dst_ip);
  if (sw_ip_cksum) put16(ip + 10, ipv4_checksum(ip));

  uint8_t* udp = ip + kIpv4HeaderBytes;
  put16(udp + 0, a.src_port);
  put16(udp + 2, a.dst_port);
  put16(udp + 4, uint16_t(kUdpHeaderBytes + payload_len));
  put16(udp + 6, 0);
  return true;
}

/// Validates the headers of a received frame of `frame_len` bytes (the whole
/// frame must be contiguous) and fills *out. Checks EtherType IPv4, version 4,
/// IHL 5, no fragmentation, protocol UDP, IP total length within the frame
/// (trailing Ethernet padding is allowed and excluded from the payload), UDP
/// length == IP payload length and, unless `dst_port` is 0, the UDP
/// destination port. With `verify_ip_cksum` the header checksum is checked
/// too (skip it when the NIC reported RTE_MBUF_F_RX_IP_CKSUM_GOOD).
inline ParseError parse(const uint8_t* frame, size_t frame_len, uint16_t dst_port, Parsed* out,
                        bool verify_ip_cksum = false) {
  using detail::get16;
  using detail::get32;
  if (frame == nullptr || frame_len < kHeadersBytes) return ParseError::kShortFrame;
  if (get16(frame + 12) != kEtherTypeIpv4) return ParseError::kNotIpv4;
  const uint8_t* ip = frame + kEthHeaderBytes;
  if ((ip[0] >> 4) != 4) return ParseError::kNotIpv4;
  if ((ip[0] & 0x0f) != 5) return ParseError::kBadIhl;
  const size_t total = get16(ip + 2);
  if (total < kIpv4HeaderBytes + kUdpHeaderBytes || total > frame_len - kEthHeaderBytes)
    return ParseError::kBadTotalLength;
  if ((get16(ip + 6) & 0x3fff) != 0) return ParseError::kFragment;  // MF bit or offset
  if (verify_ip_cksum && ipv4_checksum(ip) != 0) return ParseError::kBadIpChecksum;
  if (ip[9] != kIpProtoUdp) return ParseError::kNotUdp;
  const uint8_t* udp = ip + kIpv4HeaderBytes;
  if (get16(udp + 4) != total - kIpv4HeaderBytes) return ParseError::kBadUdpLength;
  const uint16_t port = get16(udp + 2);
  if (dst_port != 0 && port != dst_port) return ParseError::kWrongPort;

  for (size_t i = 0; i < 6; ++i) out->addr.dst_mac[i] = frame[i];
  for (size_t i = 0; i < 6; ++i) out->addr.src_mac[i] = frame[6 + i];
  out->addr.src_ip = get32(ip + 12);
  out->addr.dst_ip = get32(ip + 16);
  out->addr.src_port = get16(udp);
  out->addr.dst_port = port;
  out->payload = udp + kUdpHeaderBytes;
  out->payload_len = total - kIpv4HeaderBytes - kUdpHeaderBytes;
  return ParseError::kOk;
}

/// Short stable name of a ParseError ("short-frame", "wrong-port", ...).
inline const char* parse_error_name(ParseError e) {
  switch (e) {
    case ParseError::kOk: return "ok";
    case ParseError::kShortFrame: return "short-frame";
    case ParseError::kNotIpv4: return "not-ipv4";
    case ParseError::kBadIhl: return "bad-ihl";
    case ParseError::kBadTotalLength: return "bad-total-length";
    case ParseError::kFragment: return "fragment";
    case ParseError::kBadIpChecksum: return "bad-ip-checksum";
    case ParseError::kNotUdp: return "not-udp";
    case ParseError::kBadUdpLength: return "bad-udp-length";
    case ParseError::kWrongPort: return "wrong-port";
  }
  return "?";
}

/// The MAC grex answers to on a port it shares with the kernel (af_packet):
/// the port's own with bit 0x40 of the first octet flipped, locally
/// administered (0x02) and unicast (0x01 clear), so it always differs from
/// the port's. Frames sent to the interface's own MAC also go up the
/// kernel's IP stack, which looks up a route for each, finds no UDP socket
/// and answers with ICMP; frames to another MAC are "other host" there and
/// dropped at once, while the (promiscuous) packet socket still gets them.
inline Mac private_mac(const Mac& port_mac) {
  Mac m = port_mac;
  m[0] = static_cast<uint8_t>(((m[0] ^ 0x40) | 0x02) & ~0x01);
  return m;
}

/// Parses "aa:bb:cc:dd:ee:ff" (hex, either case); false if malformed.
inline bool parse_mac(const char* text, Mac* out) {
  Mac m{};
  for (size_t i = 0; i < 6; ++i) {
    unsigned v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = *text++;
      unsigned d;
      if (c >= '0' && c <= '9')
        d = static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        d = static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        d = static_cast<unsigned>(c - 'A' + 10);
      else
        return false;
      v = v * 16 + d;
    }
    m[i] = static_cast<uint8_t>(v);
    const char sep = *text++;
    if (sep != (i < 5 ? ':' : '\0')) return false;
  }
  *out = m;
  return true;
}

}  // namespace grex::dpdk::frame
