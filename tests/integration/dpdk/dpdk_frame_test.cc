// SPDX-License-Identifier: Apache-2.0
// Ethernet/IPv4/UDP header writing and validation (drivers/dpdk/dpdk_frame.h); needs no DPDK.
#include "drivers/dpdk/dpdk_frame.h"
#include "drivers/dpdk/dpdk_address.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace grex::dpdk::frame {
namespace {

constexpr uint16_t kPort = 4791;

FrameAddr test_addr() {
  FrameAddr a;
  a.src_mac = {0x02, 0, 0, 0, 0, 0x01};
  a.dst_mac = {0x02, 0, 0, 0, 0, 0x02};
  a.src_ip = 0x0a000001;  // 10.0.0.1
  a.dst_ip = 0x0a000002;
  a.src_port = 5000;
  a.dst_port = kPort;
  return a;
}

std::vector<uint8_t> make_frame(size_t payload_len) {
  std::vector<uint8_t> f(kHeadersBytes + payload_len);
  EXPECT_TRUE(write_headers(f.data(), test_addr(), payload_len));
  for (size_t i = 0; i < payload_len; ++i) f[kHeadersBytes + i] = uint8_t(i * 7 + 3);
  return f;
}

/// Rewrites the IP checksum after a test mutated the IP header.
void fix_cksum(std::vector<uint8_t>& f) {
  uint8_t* ip = f.data() + kEthHeaderBytes;
  ip[10] = ip[11] = 0;
  const uint16_t c = ipv4_checksum(ip);
  ip[10] = uint8_t(c >> 8);
  ip[11] = uint8_t(c);
}

ParseError parse_err(const std::vector<uint8_t>& f, size_t len, uint16_t port = kPort, bool cksum = true) {
  Parsed p;
  return parse(f.data(), len, port, &p, cksum);
}

TEST(DpdkFrame, RoundTrip) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{18}, size_t{1458}, size_t{8950}}) {
    auto f = make_frame(n);
    Parsed p;
    ASSERT_EQ(parse(f.data(), f.size(), kPort, &p, true), ParseError::kOk) << n;
    EXPECT_EQ(p.payload_len, n);
    EXPECT_EQ(p.payload, f.data() + kHeadersBytes);
    EXPECT_EQ(p.addr.src_ip, 0x0a000001u);
    EXPECT_EQ(p.addr.dst_ip, 0x0a000002u);
    EXPECT_EQ(p.addr.src_port, 5000);
    EXPECT_EQ(p.addr.dst_port, kPort);
    EXPECT_EQ(p.addr.src_mac, test_addr().src_mac);
    EXPECT_EQ(p.addr.dst_mac, test_addr().dst_mac);
  }
}

TEST(DpdkFrame, WireLayout) {
  auto f = make_frame(100);
  EXPECT_EQ(f[12], 0x08);  // EtherType 0x0800
  EXPECT_EQ(f[13], 0x00);
  const uint8_t* ip = f.data() + kEthHeaderBytes;
  EXPECT_EQ(ip[0], 0x45);
  EXPECT_EQ((ip[2] << 8) | ip[3], 128);  // 20 + 8 + 100
  EXPECT_EQ(ip[9], kIpProtoUdp);
  EXPECT_EQ(ip[12], 10);  // source 10.0.0.1, big-endian
  EXPECT_EQ(ip[15], 1);
  EXPECT_EQ(ipv4_checksum(ip), 0) << "a header with its checksum sums to 0";
  const uint8_t* udp = ip + kIpv4HeaderBytes;
  EXPECT_EQ((udp[2] << 8) | udp[3], kPort);
  EXPECT_EQ((udp[4] << 8) | udp[5], 108);
}

TEST(DpdkFrame, KnownChecksum) {
  // The classic example header (Wikipedia, "IPv4 header checksum"): checksum 0xb861.
  const uint8_t hdr[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                           0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  EXPECT_EQ(ipv4_checksum(hdr), 0xb861);
}

TEST(DpdkFrame, OffloadLeavesChecksumZero) {
  std::vector<uint8_t> f(kHeadersBytes);
  ASSERT_TRUE(write_headers(f.data(), test_addr(), 0, /*sw_ip_cksum=*/false));
  EXPECT_EQ(f[kEthHeaderBytes + 10], 0);
  EXPECT_EQ(f[kEthHeaderBytes + 11], 0);
  EXPECT_EQ(parse_err(f, f.size(), kPort, false), ParseError::kOk);
  EXPECT_EQ(parse_err(f, f.size(), kPort, true), ParseError::kBadIpChecksum);
}

TEST(DpdkFrame, PayloadTooLargeIsRefused) {
  std::vector<uint8_t> f(kHeadersBytes, 0xee);
  EXPECT_FALSE(write_headers(f.data(), test_addr(), kMaxUdpPayloadBytes + 1));
  EXPECT_EQ(f[0], 0xee) << "nothing written";
  EXPECT_TRUE(write_headers(f.data(), test_addr(), kMaxUdpPayloadBytes));
}

TEST(DpdkFrame, EthernetPaddingIsNotPayload) {
  auto f = make_frame(4);
  f.resize(60, 0);  // padded to the Ethernet minimum
  Parsed p;
  ASSERT_EQ(parse(f.data(), f.size(), kPort, &p), ParseError::kOk);
  EXPECT_EQ(p.payload_len, 4u);
}

TEST(DpdkFrame, ShortFrame) {
  auto f = make_frame(0);
  EXPECT_EQ(parse_err(f, 41), ParseError::kShortFrame);
  EXPECT_EQ(parse_err(f, 0), ParseError::kShortFrame);
  Parsed p;
  EXPECT_EQ(parse(nullptr, 100, kPort, &p), ParseError::kShortFrame);
}

TEST(DpdkFrame, WrongEtherType) {
  auto f = make_frame(10);
  f[12] = 0x86;  // IPv6
  f[13] = 0xdd;
  EXPECT_EQ(parse_err(f, f.size()), ParseError::kNotIpv4);
  f = make_frame(10);
  f[12] = 0x81;  // VLAN tag: not parsed
  f[13] = 0x00;
  EXPECT_EQ(parse_err(f, f.size()), ParseError::kNotIpv4);
}

TEST(DpdkFrame, WrongIpVersion) {
  auto f = make_frame(10);
  f[kEthHeaderBytes] = 0x65;
  fix_cksum(f);
  EXPECT_EQ(parse_err(f, f.size()), ParseError::kNotIpv4);
}

TEST(DpdkFrame, IhlNotFive) {
  for (uint8_t ihl : {4, 6, 15}) {
    auto f = make_frame(40);
    f[kEthHeaderBytes] = uint8_t(0x40 | ihl);
    fix_cksum(f);
    EXPECT_EQ(parse_err(f, f.size()), ParseError::kBadIhl) << int(ihl);
  }
}

TEST(DpdkFrame, BadTotalLength) {
  auto f = make_frame(10);
  uint8_t* ip = f.data() + kEthHeaderBytes;
  ip[2] = 0;
  ip[3] = 39;  // one more than the frame holds (20 + 8 + 10 = 38)
  fix_cksum(f);
  EXPECT_EQ(parse_err(f, f.size()), ParseError::kBadTotalLength);
  ip[3] = 27;  // shorter than IP + UDP headers
  fix_cksum(f);
  EXPECT_EQ(parse_err(f, f.size()), ParseError::kBadTotalLength);
  // A frame cut short by the receiver: total length claims more than arrived.
  auto g = make_frame(100);
  EXPECT_EQ(parse_err(g, g.size() - 1), ParseError::kBadTotalLength);
}

TEST(DpdkFrame, Fragment) {
  auto f = make_frame(10);
  f[kEthHeaderBytes + 6] = 0x20;  // MF
  f[kEthHeaderBytes + 7] = 0x00;
  fix_cksum(f);
  EXPECT_EQ(parse_err(f, f.size()), ParseError::kFragment);
  f[kEthHeaderBytes + 6] = 0x00;
  f[kEthHeaderBytes + 7] = 0x10;  // offset 16 * 8
  fix_cksum(f);
  EXPECT_EQ(parse_err(f, f.size()), ParseError::kFragment);
}

TEST(DpdkFrame, BadChecksumOnlyWhenVerifying) {
  auto f = make_frame(10);
  f[kEthHeaderBytes + 8] = 1;  // TTL changed, checksum stale
  EXPECT_EQ(parse_err(f, f.size(), kPort, true), ParseError::kBadIpChecksum);
  EXPECT_EQ(parse_err(f, f.size(), kPort, false), ParseError::kOk);
}

TEST(DpdkFrame, NotUdp) {
  auto f = make_frame(10);
  f[kEthHeaderBytes + 9] = 6;  // TCP
  fix_cksum(f);
  EXPECT_EQ(parse_err(f, f.size()), ParseError::kNotUdp);
}

TEST(DpdkFrame, UdpLengthInconsistent) {
  auto f = make_frame(10);
  uint8_t* udp = f.data() + kEthHeaderBytes + kIpv4HeaderBytes;
  udp[5] = 17;  // 18 expected
  EXPECT_EQ(parse_err(f, f.size()), ParseError::kBadUdpLength);
}

TEST(DpdkFrame, WrongPort) {
  auto f = make_frame(10);
  EXPECT_EQ(parse_err(f, f.size(), kPort + 1), ParseError::kWrongPort);
  EXPECT_EQ(parse_err(f, f.size(), 0), ParseError::kOk) << "port 0 accepts any";
}

TEST(DpdkFrame, ErrorNames) {
  EXPECT_STREQ(parse_error_name(ParseError::kOk), "ok");
  EXPECT_STREQ(parse_error_name(ParseError::kBadIhl), "bad-ihl");
  EXPECT_STREQ(parse_error_name(ParseError::kWrongPort), "wrong-port");
}

// The MAC grex answers to on an af_packet port: never the port's own,
// always locally administered unicast, the rest of the address kept.
TEST(DpdkFrame, PrivateMacDiffersFromThePortsAndIsLocalUnicast) {
  for (const Mac port : {Mac{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}, Mac{0x02, 0x00, 0x00, 0x00, 0x00, 0x01},
                         Mac{0x42, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}, Mac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}) {
    const Mac m = private_mac(port);
    EXPECT_NE(m, port);
    EXPECT_EQ(m[0] & 0x02, 0x02) << "locally administered";
    EXPECT_EQ(m[0] & 0x01, 0x00) << "unicast";
    EXPECT_TRUE(std::equal(m.begin() + 1, m.end(), port.begin() + 1));
    EXPECT_EQ(private_mac(port), m) << "the same port gives the same MAC";
  }
  EXPECT_EQ(private_mac(Mac{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}), (Mac{0x12, 0x54, 0x00, 0x12, 0x34, 0x56}));
}

TEST(DpdkFrame, ParseMac) {
  Mac m{};
  ASSERT_TRUE(parse_mac("02:aB:0c:D0:ef:10", &m));
  EXPECT_EQ(m, (Mac{0x02, 0xab, 0x0c, 0xd0, 0xef, 0x10}));
  for (const char* bad : {"", "02:ab:0c:d0:ef", "02:ab:0c:d0:ef:10:", "02-ab-0c-d0-ef-10", "02:ab:0c:d0:ef:1",
                          "02:ab:0c:d0:ef:1g", "2:ab:0c:d0:ef:10", "02:ab:0c:d0:ef:100"})
    EXPECT_FALSE(parse_mac(bad, &m)) << bad;
}

// The address peers exchange through the store (issue 28): every field is
// checked, nothing throws (std::stoul did on a forged IP field), and the host
// id keeps its colons.
TEST(Address, ParsesWhatItFormatsAndRefusesTheRest) {
  PeerAddress a;
  a.mode = "port";
  a.mac = {0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee};
  a.ip = 0x0a610001;
  a.udp_port = 47000;
  a.pid = 4242;
  a.shares_memory = true;
  for (size_t i = 0; i < sizeof(a.nonce); ++i) a.nonce[i] = static_cast<uint8_t>(i * 17);
  a.max_payload = 8832;
  a.auth = wire::AuthMode::kFull;
  a.host_id = "host/boot:id:net:[4026531840]";
  const std::string s = format_address(a);
  PeerAddress b;
  ASSERT_TRUE(parse_address(s, &b)) << s;
  EXPECT_EQ(format_address(b), s);
  EXPECT_EQ(b.host_id, a.host_id);
  EXPECT_EQ(b.ip, a.ip);
  EXPECT_TRUE(std::equal(b.nonce, b.nonce + sizeof(b.nonce), a.nonce));
  auto field = [&](int k, const std::string& v) {  // s with field k replaced
    std::string out, rest = s;
    for (int i = 0; i < k; ++i) {
      out += rest.substr(0, rest.find(':') + 1);
      rest = rest.substr(rest.find(':') + 1);
    }
    return out + v + rest.substr(rest.find(':'));
  };
  for (const std::string& bad :
       {std::string(""), std::string("dpdk"), s.substr(0, s.find(":full:") + 6), field(0, "shm"), field(1, "tap"),
        field(2, "02aabbccddzz"), field(3, "ten"), field(3, "99999999999"), field(4, "0"), field(4, "70000"),
        field(5, "-1"), field(6, "2"), field(7, "00"), field(8, "63"), field(8, "8832x"), field(9, "on")}) {
    PeerAddress x;
    EXPECT_FALSE(parse_address(bad, &x)) << bad;
  }
}

}  // namespace
}  // namespace grex::dpdk::frame
