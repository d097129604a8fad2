// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the packet parsers: the DPDK frame parser
// (dpdk::frame::parse), the datagram header decoder (wire::decode) and a
// reliable::Flow fed what they accept. Every input is used three ways:
//  1. as an Ethernet frame: parse() with dst_port 0 and 47000, with and
//     without IP checksum verification; the UDP payload goes on to decode();
//  2. as a bare datagram for decode();
//  3. as a script that drives two connected Flows (flow_script.cc), where
//     valid packets reach the flows and the fuzzer drops, duplicates,
//     reorders, corrupts and forges them.
// Accepted packets of 1 and 2 go to a Flow with a posted receive. Invariants
// abort; ASan catches any access outside posted buffers.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <vector>

#include "drivers/dpdk/dpdk_frame.h"
#include "tests/fuzz/flow_script.h"
#include "tests/fuzz/fuzz_support.h"
#include "transport/reliable_flow.h"
#include "transport/wire.h"

namespace grex::fuzz {
namespace {

namespace frame = dpdk::frame;

constexpr uint16_t kUdpPort = 47000;
constexpr uint32_t kVictimMaxPayloadBytes = 9000;
constexpr size_t kVictimRecvBytes = 4096;

// Parses with all four settings and checks they agree; returns the result of
// the most permissive one (any port, no checksum) in *out.
bool check_frame(const uint8_t* data, size_t size, frame::Parsed* out) {
  frame::Parsed p[2][2];
  frame::ParseError e[2][2];
  for (int port = 0; port < 2; ++port)
    for (int verify = 0; verify < 2; ++verify) {
      e[port][verify] = frame::parse(data, size, port ? kUdpPort : 0, &p[port][verify], verify != 0);
      FUZZ_CHECK(std::strcmp(frame::parse_error_name(e[port][verify]), "?") != 0);
    }
  for (int port = 0; port < 2; ++port)
    for (int verify = 0; verify < 2; ++verify) {
      if (e[port][verify] != frame::ParseError::kOk) continue;
      const frame::Parsed& x = p[port][verify];
      FUZZ_CHECK(size >= frame::kHeadersBytes);
      FUZZ_CHECK(x.payload == data + frame::kHeadersBytes);
      FUZZ_CHECK(x.payload_len <= size - frame::kHeadersBytes);
      FUZZ_CHECK(x.payload_len <= frame::kMaxUdpPayloadBytes);
      if (port) FUZZ_CHECK(x.addr.dst_port == kUdpPort);
      // A stricter setting never accepts what a looser one refuses.
      FUZZ_CHECK(e[0][0] == frame::ParseError::kOk);
      FUZZ_CHECK(p[0][0].payload_len == x.payload_len && p[0][0].addr.src_ip == x.addr.src_ip);
    }
  if (e[0][0] != frame::ParseError::kOk) return false;
  FUZZ_CHECK(e[1][0] == frame::ParseError::kOk || e[1][0] == frame::ParseError::kWrongPort);
  FUZZ_CHECK(e[0][1] == frame::ParseError::kOk || e[0][1] == frame::ParseError::kBadIpChecksum);
  *out = p[0][0];

  // What write_headers() produces for the same flow parses back to it.
  std::vector<uint8_t> again(frame::kHeadersBytes + out->payload_len);
  FUZZ_CHECK(frame::write_headers(again.data(), out->addr, out->payload_len));
  if (out->payload_len > 0) std::memcpy(again.data() + frame::kHeadersBytes, out->payload, out->payload_len);
  frame::Parsed q;
  FUZZ_CHECK(frame::parse(again.data(), again.size(), out->addr.dst_port, &q, true) == frame::ParseError::kOk);
  FUZZ_CHECK(q.payload_len == out->payload_len && q.addr.src_mac == out->addr.src_mac &&
             q.addr.dst_mac == out->addr.dst_mac && q.addr.src_ip == out->addr.src_ip &&
             q.addr.dst_ip == out->addr.dst_ip && q.addr.src_port == out->addr.src_port);
  return true;
}

// Decodes with a few payload bounds and checks the invariants of acceptance;
// returns whether the bound `max_payload` accepts (header in *h).
bool check_datagram(const uint8_t* data, size_t len, uint32_t max_payload, wire::Header* h) {
  uint32_t bounds[] = {0, 1400, 8192, max_payload, UINT32_MAX};
  std::sort(std::begin(bounds), std::end(bounds));
  bool accepted_before = false;
  bool result = false;
  for (uint32_t max : bounds) {
    wire::Header x;
    wire::Reject r = wire::decode(data, len, max, &x);
    FUZZ_CHECK(std::strcmp(wire::reject_name(r), "?") != 0);
    if (r != wire::Reject::kNone) {
      FUZZ_CHECK(!accepted_before);  // a larger bound accepts what a smaller one did
      continue;
    }
    accepted_before = true;
    FUZZ_CHECK(x.payload_len <= max);
    FUZZ_CHECK(wire::kHeaderBytes + x.payload_len == len);
    FUZZ_CHECK(x.version == wire::kVersion);
    FUZZ_CHECK((x.flags & ~wire::kKnownFlags) == 0);
    uint8_t again[wire::kHeaderBytes];
    wire::encode(x, again, data + wire::kHeaderBytes);
    FUZZ_CHECK(std::memcmp(again, data, wire::kTagOffset) == 0);  // the tag is the driver's, outside Header
    if (max == max_payload) {
      *h = x;
      result = true;
    }
  }
  return result;
}

// A flow with one posted receive, fed every packet the parsers accepted.
void feed_victim(const std::vector<std::pair<wire::Header, const uint8_t*>>& pkts) {
  if (pkts.empty()) return;
  reliable::Config cfg;
  cfg.max_payload = kVictimMaxPayloadBytes;
  cfg.window = 64;
  cfg.queue_depth = 4;
  OwnedRegion recv_buf(kVictimRecvBytes, 1);
  OwnedRegion write_target(kVictimRecvBytes, 2);
  TableOfOne table(&write_target);
  reliable::Flow flow(cfg, 1, 2, 1, &table);
  FUZZ_CHECK(flow.post_recv({&recv_buf, 0, kVictimRecvBytes, 0, 42}));
  uint64_t now = 1'000'000;
  for (const auto& [h, payload] : pkts) {
    flow.on_packet(h, payload, now);
    now += 1'000;
    reliable::TxPacket tx[16];
    size_t n = flow.poll_tx(tx, now);
    for (size_t i = 0; i < n; ++i) check_tx_packet(tx[i], cfg);
    Completion c[8];
    n = flow.poll_completions(c);
    for (size_t i = 0; i < n; ++i) {
      FUZZ_CHECK(c[i].op == Op::kRecv || c[i].op == Op::kRemoteWrite);
      if (std::getenv("GREX_FUZZ_TRACE") != nullptr)
        std::fprintf(stderr, "victim: completion op %u status %u bytes %lu\n", unsigned(c[i].op), unsigned(c[i].status),
                     static_cast<unsigned long>(c[i].bytes));
      if (c[i].op == Op::kRecv) {
        FUZZ_CHECK(c[i].context == 42 && c[i].bytes <= kVictimRecvBytes);
        recv_buf.poison();  // finished: the flow must never write here again
      }
    }
  }
}

}  // namespace
}  // namespace grex::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace grex::fuzz;
  std::vector<std::pair<grex::wire::Header, const uint8_t*>> accepted;
  grex::dpdk::frame::Parsed parsed;
  grex::wire::Header h;
  if (check_frame(data, size, &parsed) &&
      check_datagram(parsed.payload, parsed.payload_len, kVictimMaxPayloadBytes, &h))
    accepted.emplace_back(h, parsed.payload + grex::wire::kHeaderBytes);
  if (check_datagram(data, size, kVictimMaxPayloadBytes, &h)) accepted.emplace_back(h, data + grex::wire::kHeaderBytes);
  feed_victim(accepted);
  run_flow_script(data, size);
  return 0;
}
