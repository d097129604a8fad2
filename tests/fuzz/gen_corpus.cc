// SPDX-License-Identifier: Apache-2.0
// Writes the seed corpus of packet_fuzz (tests/fuzz/corpus/): valid frames
// and datagrams the victim flow accepts, and scripts for flow_script.cc.
// Regenerate from the repository root:
//   g++ -std=c++20 -Ilib/include -Ilib -I. tests/fuzz/gen_corpus.cc lib/transport/wire.cc -o /tmp/gen_corpus
//   /tmp/gen_corpus tests/fuzz/corpus
#include <cstdio>
#include <string>
#include <vector>

#include "drivers/dpdk/dpdk_frame.h"
#include "transport/wire.h"

namespace {

using grex::wire::Header;
using grex::wire::Type;
using Bytes = std::vector<uint8_t>;

Bytes datagram(const Header& h) {
  Bytes b(grex::wire::kHeaderBytes + h.payload_len);
  for (uint32_t i = 0; i < h.payload_len; ++i) b[grex::wire::kHeaderBytes + i] = static_cast<uint8_t>(i * 7);
  grex::wire::encode(h, b.data(), b.data() + grex::wire::kHeaderBytes);
  return b;
}

Bytes in_frame(const Bytes& dgram) {
  namespace frame = grex::dpdk::frame;
  Bytes b(frame::kHeadersBytes + dgram.size());
  frame::FrameAddr a{{2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 2}, 0x0a630001, 0x0a630002, 47000, 47000};
  frame::write_headers(b.data(), a, dgram.size());
  std::copy(dgram.begin(), dgram.end(), b.begin() + frame::kHeadersBytes);
  return b;
}

// Script opcodes (flow_script.cc): side 0 uses k, side 1 uses 132 + k.
enum Op : uint8_t { kRecv = 0, kSend = 1, kWrite = 2, kPump = 3, kDeliver = 4, kMangle = 5, kTime = 6, kExchange = 10 };
uint8_t on(int side, Op op) { return static_cast<uint8_t>(side == 0 ? op : 132 + op); }

bool write_file(const std::string& dir, const char* name, const Bytes& b) {
  std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(b.data(), 1, b.size(), f) != b.size()) {
    std::perror(path.c_str());
    return false;
  }
  return std::fclose(f) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  Header data;  // fills the victim's posted receive (sequence 0) in one packet
  data.type = Type::kData;
  data.flow = 1;
  data.msg_len = 100;
  data.payload_len = 100;
  Header write = data;  // write with immediate into the victim's region (rkey 2)
  write.flags = grex::wire::kFlagWrite | grex::wire::kFlagImm;
  write.tag = (uint64_t{2} << 32) | 9;
  write.remote = 64;
  Header advert;
  advert.type = Type::kData;
  advert.flags = grex::wire::kFlagAdvert;
  advert.msg_len = 4096;
  // Three receives in one advert: ordinals 0, 1, 2 (entries for 1 and 2).
  Header packed = advert;
  packed.payload_len = 2 * grex::wire::kAdvertEntryBytes;
  Bytes packed_dgram(grex::wire::kHeaderBytes + packed.payload_len);
  for (uint32_t i = 0; i < 2; ++i)
    grex::wire::encode_advert({i + 1, 4096, 0},
                              packed_dgram.data() + grex::wire::kHeaderBytes + i * grex::wire::kAdvertEntryBytes);
  grex::wire::encode(packed, packed_dgram.data(), packed_dgram.data() + grex::wire::kHeaderBytes);
  Header ack;
  ack.type = Type::kAck;
  ack.ack = 1;
  ack.sack = 0x5;
  Header probe;
  probe.type = Type::kTimingReq;
  probe.psn = 1;
  probe.timestamp = 123456;

  bool ok = write_file(dir, "frame_data", in_frame(datagram(data))) &&
            write_file(dir, "frame_write_imm", in_frame(datagram(write))) &&
            write_file(dir, "dgram_data", datagram(data)) && write_file(dir, "dgram_advert", datagram(advert)) &&
            write_file(dir, "dgram_advert_packed", packed_dgram) &&
            write_file(dir, "dgram_ack", datagram(ack)) && write_file(dir, "dgram_timing_req", datagram(probe));
  // Checked mode, window 64, 512 B packets: side 0 receives 1000 B from side 1.
  ok = ok && write_file(dir, "script_send_recv",
                        Bytes{0x05, on(0, kRecv), 0xe8, 0x03, 3, 1, on(1, kSend), 0xe8, 0x03, 5, 1, kExchange,
                              kExchange, kExchange, kExchange});
  // The same step by step, with the first data packet dropped and time moving on to the RTO.
  ok = ok && write_file(dir, "script_loss",
                        Bytes{0x05,
                              on(0, kRecv),
                              0xe8,
                              0x03,
                              3,
                              1,
                              on(1, kSend),
                              0xe8,
                              0x03,
                              5,
                              1,
                              on(0, kPump),
                              31,
                              on(1, kDeliver),
                              7,
                              on(1, kPump),
                              31,
                              on(0, kDeliver),
                              0,
                              on(0, kMangle),
                              0,
                              0,
                              0,
                              on(0, kDeliver),
                              7,
                              kExchange,
                              kTime,
                              20,
                              kExchange,
                              kExchange});
  // Side 0 writes 300 B with an immediate at offset 100 of side 1's region.
  ok = ok && write_file(dir, "script_write",
                        Bytes{0x05, on(0, kWrite), 0x2c, 0x01, 4, 100, 0, kExchange, kExchange, kExchange});
  return ok ? 0 : 1;
}
