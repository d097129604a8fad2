// SPDX-License-Identifier: Apache-2.0
// A stranger on the wire, for tests: on a switch between two hosts, it
// watches the frames one rank sends (arriving on SNIFF_IFACE, that host's
// switch port) and forges packets in that rank's name out of INJECT_IFACE
// (the peer's port), each with a valid CRC (which the receiver no longer
// checks where a tag stands in for it), the flow's real id and the
// sender's addresses: CLOSE (abort, naming a culprit), ACK past what arrived,
// DATA at the next PSNs and one-sided writes to rkeys 1..8. Without
// authentication any of them ends or corrupts the job (issue 28); with it,
// every one must be counted and dropped.
//
// Usage: wire_forger SNIFF_IFACE INJECT_IFACE UDP_PORT SECONDS ROUNDS
// Prints "forged close=N ack=N data=N write=N"; exits 0 once it forged, 3 if
// it never saw a grex data packet arrive on SNIFF_IFACE within SECONDS.
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "drivers/dpdk/dpdk_frame.h"
#include "transport/wire.h"

namespace {

using namespace grex;

struct Template {
  dpdk::frame::FrameAddr addr;  // as sent: this namespace's rank -> its peer
  wire::Header h;
};

int open_socket(const char* iface) {
  int fd = ::socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (fd < 0) return -1;
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = static_cast<int>(if_nametoindex(iface));
  if (sll.sll_ifindex == 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{0, 100'000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// The next grex data packet this namespace's rank sends, or false at the deadline.
bool sniff(int fd, uint16_t port, std::chrono::steady_clock::time_point until, Template* t) {
  std::vector<uint8_t> buf(16384);
  while (std::chrono::steady_clock::now() < until) {
    sockaddr_ll from{};
    socklen_t fl = sizeof from;
    ssize_t n = ::recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &fl);
    if (n <= 0 || from.sll_pkttype == PACKET_OUTGOING) continue;  // what the host sent us
    dpdk::frame::Parsed p;
    if (dpdk::frame::parse(buf.data(), static_cast<size_t>(n), port, &p) != dpdk::frame::ParseError::kOk) continue;
    wire::Header h;
    // The fields alone: a tagged packet goes without a CRC (its tag stands in).
    if (wire::decode_fields(p.payload, p.payload_len, 9000, &h) != wire::Reject::kNone) continue;
    if (h.type != wire::Type::kData || (h.flags & (wire::kFlagAdvert | wire::kFlagWrite)) != 0) continue;
    t->addr = p.addr;
    t->h = h;
    return true;
  }
  return false;
}

bool send_forged(int fd, const char* iface, const Template& t, wire::Header h, size_t payload_len) {
  std::vector<uint8_t> frame(dpdk::frame::kHeadersBytes + wire::kHeaderBytes + payload_len, 0xee);
  h.payload_len = static_cast<uint32_t>(payload_len);
  h.seq = t.h.seq + 100'000;  // ahead of the real sender: a replay window would take it
  dpdk::frame::write_headers(frame.data(), t.addr, wire::kHeaderBytes + payload_len, true);
  uint8_t* g = frame.data() + dpdk::frame::kHeadersBytes;
  wire::encode(h, g, g + wire::kHeaderBytes);  // a valid CRC (over the payload too when flagged)
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = static_cast<int>(if_nametoindex(iface));
  to.sll_halen = 6;
  std::memcpy(to.sll_addr, t.addr.dst_mac.data(), 6);
  return ::sendto(fd, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) ==
         static_cast<ssize_t>(frame.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s SNIFF_IFACE INJECT_IFACE UDP_PORT SECONDS ROUNDS\n", argv[0]);
    return 2;
  }
  const char* iface = argv[2];
  const auto port = static_cast<uint16_t>(std::atoi(argv[3]));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(std::atoi(argv[4]));
  const int rounds = std::atoi(argv[5]);
  int fd = open_socket(argv[1]);
  int out = open_socket(iface);
  if (fd < 0 || out < 0) {
    std::perror("wire_forger: AF_PACKET socket");
    return 2;
  }
  unsigned close_n = 0, ack_n = 0, data_n = 0, write_n = 0;
  for (int r = 0; r < rounds; ++r) {
    Template t;
    if (!sniff(fd, port, until, &t)) break;
    const wire::Header& s = t.h;
    // CLOSE with abort: "rank 0 is the culprit".
    wire::Header c;
    c.type = wire::Type::kClose;
    c.flags = wire::kFlagAbort;
    c.flow = s.flow;
    c.ack = s.ack;
    c.msg_id = 1;
    close_n += send_forged(out, iface, t, c, 0);
    // ACKs past what the peer has received from it.
    for (uint32_t k = 1; k <= 4; ++k) {
      wire::Header a;
      a.type = wire::Type::kAck;
      a.flow = s.flow;
      a.ack = s.ack + 16 * k;
      ack_n += send_forged(out, iface, t, a, 0);
    }
    // DATA at the PSNs the real sender uses next, over the same message.
    for (uint32_t k = 1; k <= 4; ++k) {
      wire::Header d = s;
      d.psn = s.psn + k;
      d.offset = s.offset + s.payload_len * k < s.msg_len ? s.offset + s.payload_len * k : s.offset;
      const size_t len = std::min<uint64_t>(s.payload_len, s.msg_len - d.offset);
      data_n += send_forged(out, iface, t, d, len);
    }
    // Writes to the first rkeys an allocator would hand out.
    for (uint32_t rkey = 1; rkey <= 8; ++rkey) {
      wire::Header w;
      w.type = wire::Type::kData;
      w.flags = wire::kFlagWrite;
      w.flow = s.flow;
      w.psn = s.psn + 8 + rkey;
      w.ack = s.ack;
      w.msg_id = 0x7000 + rkey;
      w.msg_len = 64;
      w.tag = static_cast<uint64_t>(rkey) << 32;
      write_n += send_forged(out, iface, t, w, 64);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::close(fd);
  ::close(out);
  std::printf("forged close=%u ack=%u data=%u write=%u\n", close_n, ack_n, data_n, write_n);
  return close_n + ack_n + data_n + write_n > 0 ? 0 : 3;
}
