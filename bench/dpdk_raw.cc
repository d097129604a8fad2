// SPDX-License-Identifier: Apache-2.0
// Raw PMD throughput over memif between two processes: a burst sender and a counting receiver.
//
//   dpdk_raw --role server --socket /tmp/d/memif.sock --size 8192 --seconds 3   (receiver, lcore 0)
//   dpdk_raw --role client --socket /tmp/d/memif.sock --size 8192               (sender, lcore 1)
//
// With --zero-copy 1 on both, the receiver is memif's client in zero-copy
// mode (GREX_DPDK_HUGE=1 and reserved hugepages) and the sender, memif's
// server, starts first. --rsize sets memif's ring size on both.
//
// The receiver prints one line "frame_bytes pps gbit_per_s", measured from its
// first packet over --seconds. Frames are Ethernet/IPv4/UDP with a 64-bit
// sequence number after the headers (the receiver counts gaps); the rest of
// each frame is not written, so this measures the PMD, not the application.
// memif's bsize defaults to the frame size rounded up to 1 KiB plus 1 KiB (at
// least 2048), so a frame never spans memif buffers; both sides must agree.
// Shutdown: memif crashes if one side closes while the other polls, so the
// receiver creates <socket>.server-done when it stops polling, the sender then
// stops, creates <socket>.client-done, and only then does either close.
#include "drivers/dpdk/dpdk_eal.h"
#include "drivers/dpdk/dpdk_frame.h"
#include "drivers/dpdk/dpdk_port.h"

#include <rte_mbuf.h>
#include <rte_pause.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;
using grex::dpdk::Port;
namespace frame = grex::dpdk::frame;

constexpr uint16_t kBurst = 32;
/// PAUSEs after the ring was full: spinning on it steals the shared cache line from the receiver.
constexpr int kTxFullPauses = 16;
constexpr uint16_t kUdpPort = 4791;
constexpr size_t kSeqOffset = frame::kHeadersBytes;
constexpr uint32_t kMinFrameBytes = kSeqOffset + 8;
constexpr uint32_t kMaxFrameBytes = 9014;  // MTU 9000

struct Args {
  std::string role;
  std::string socket;
  uint32_t size = 8192;
  double seconds = 3;
  int lcore = -1;
  uint32_t bsize = 0;  // memif buffer size; 0: derived from --size
  bool zero_copy = false;  // the receiver is memif's client, in zero-copy mode
  int rsize = 0;           // log2 of memif's ring slots; 0: memif's default (10)
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "dpdk_raw: %s\nusage: dpdk_raw --role server|client --socket PATH [--size FRAME_BYTES (%u..%u)] "
               "[--seconds S] [--lcore N] [--bsize MEMIF_BUFFER_BYTES] [--zero-copy 0|1] [--rsize LOG2_SLOTS]\n",
               why, kMinFrameBytes, kMaxFrameBytes);
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + k).c_str());
    const char* v = argv[++i];
    if (k == "--role") a.role = v;
    else if (k == "--socket") a.socket = v;
    else if (k == "--size") a.size = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    else if (k == "--seconds") a.seconds = std::strtod(v, nullptr);
    else if (k == "--lcore") a.lcore = std::atoi(v);
    else if (k == "--bsize") a.bsize = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    else if (k == "--zero-copy") a.zero_copy = std::strcmp(v, "1") == 0;
    else if (k == "--rsize") a.rsize = std::atoi(v);
    else usage(("unknown option " + k).c_str());
  }
  if (a.role != "server" && a.role != "client") usage("--role must be server or client");
  if (a.socket.empty()) usage("--socket is required");
  if (a.size < kMinFrameBytes || a.size > kMaxFrameBytes) usage("--size out of range");
  if (a.seconds <= 0) usage("--seconds must be > 0");
  if (a.rsize != 0 && (a.rsize < 1 || a.rsize > 14)) usage("--rsize must be 1..14");
  if (a.lcore < 0) a.lcore = a.role == "server" ? 0 : 1;
  return a;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

void touch(const std::string& path) {
  if (FILE* f = std::fopen(path.c_str(), "w")) std::fclose(f);
}

/// Waits for a marker file; false after `timeout_s`.
bool wait_for(const std::string& path, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (!exists(path)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

uint64_t read_seq(const rte_mbuf* m) {
  uint64_t seq = 0;
  if (m->data_len >= kSeqOffset + sizeof(seq)) std::memcpy(&seq, rte_pktmbuf_mtod(m, const uint8_t*) + kSeqOffset, 8);
  return seq;
}

int run_server(const Args& a, Port& port) {
  const std::string server_done = a.socket + ".server-done";
  const std::string client_done = a.socket + ".client-done";
  rte_mbuf* pkts[kBurst];
  uint64_t frames = 0, bytes = 0, gaps = 0, short_frames = 0, next_seq = 0;
  const auto first_deadline = Clock::now() + std::chrono::seconds(30);
  Clock::time_point t0{};
  bool started = false;
  const auto window = std::chrono::duration<double>(a.seconds);
  while (true) {
    const uint16_t n = port.rx_burst(pkts, kBurst);
    if (n == 0) {
      const auto now = Clock::now();
      if (started ? now - t0 >= window : now > first_deadline) break;
      continue;
    }
    if (!started) {
      started = true;
      t0 = Clock::now();
      next_seq = read_seq(pkts[0]);
    }
    for (uint16_t i = 0; i < n; ++i) {
      const uint64_t seq = read_seq(pkts[i]);
      if (seq != next_seq) ++gaps;
      next_seq = seq + 1;
      if (pkts[i]->pkt_len != a.size) ++short_frames;
      bytes += pkts[i]->pkt_len;
    }
    frames += n;
    rte_pktmbuf_free_bulk(pkts, n);
    if ((frames & 0x3ff) < n && Clock::now() - t0 >= window) break;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  // Stop polling, tell the sender, wait until it stopped too; the caller closes.
  touch(server_done);
  const bool client_stopped = wait_for(client_done, 30);
  std::remove(server_done.c_str());
  std::remove(client_done.c_str());
  if (!started) {
    std::fprintf(stderr, "dpdk_raw: server received nothing in 30 s (is the client running?)\n");
    return 1;
  }
  if (!client_stopped) std::fprintf(stderr, "dpdk_raw: client did not confirm it stopped; closing anyway\n");
  const double pps = static_cast<double>(frames) / elapsed;
  const double gbit = static_cast<double>(bytes) * 8 / elapsed / 1e9;
  std::printf("%u %.0f %.2f\n", a.size, pps, gbit);
  std::fprintf(stderr, "dpdk_raw: server %lu frames in %.3f s, %lu sequence gaps, %lu frames of the wrong size\n",
               static_cast<unsigned long>(frames), elapsed, static_cast<unsigned long>(gaps),
               static_cast<unsigned long>(short_frames));
  return gaps == 0 && short_frames == 0 ? 0 : 3;
}

int run_client(const Args& a, Port& port) {
  const std::string server_done = a.socket + ".server-done";
  const std::string client_done = a.socket + ".client-done";
  const auto link_deadline = Clock::now() + std::chrono::seconds(20);
  while (!port.link_up()) {
    if (Clock::now() > link_deadline) {
      std::fprintf(stderr, "dpdk_raw: memif link not up after 20 s (is the server running on %s?)\n",
                   a.socket.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  uint8_t hdr[frame::kHeadersBytes];
  frame::FrameAddr addr;
  addr.src_mac = port.mac();
  addr.dst_mac = {0x02, 0, 0, 0, 0, 0x01};
  addr.src_ip = 0x0a000002;
  addr.dst_ip = 0x0a000001;
  addr.src_port = kUdpPort;
  addr.dst_port = kUdpPort;
  frame::write_headers(hdr, addr, a.size - frame::kHeadersBytes, !port.tx_ip_cksum());

  rte_mbuf* pkts[kBurst];
  uint16_t pending = 0;  // pkts[0..pending) built but not yet taken by the port
  uint64_t seq = 0, sent = 0, loops = 0;
  const auto give_up = Clock::now() + std::chrono::duration<double>(a.seconds + 60);
  while (true) {
    if ((++loops & 0xfff) == 0 && (exists(server_done) || Clock::now() > give_up)) break;
    if (pending == 0) {
      if (rte_pktmbuf_alloc_bulk(port.pool(), pkts, kBurst) != 0) continue;
      for (uint16_t i = 0; i < kBurst; ++i) {
        uint8_t* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(pkts[i], static_cast<uint16_t>(a.size)));
        std::memcpy(d, hdr, sizeof(hdr));
        std::memcpy(d + kSeqOffset, &seq, sizeof(seq));
        ++seq;
        port.set_tx_cksum_flags(pkts[i]);
      }
      pending = kBurst;
    }
    const uint16_t n = port.tx_burst(pkts + kBurst - pending, pending);
    pending = static_cast<uint16_t>(pending - n);
    sent += n;
    if (n == 0)
      for (int i = 0; i < kTxFullPauses; ++i) rte_pause();
  }
  if (pending != 0) rte_pktmbuf_free_bulk(pkts + kBurst - pending, pending);
  touch(client_done);  // stopped polling; the server may close
  std::fprintf(stderr, "dpdk_raw: client sent %lu frames\n", static_cast<unsigned long>(sent));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  grex::dpdk::EalOptions eo;
  eo.lcore = a.lcore;
  eo.file_prefix = "grex-raw-" + a.role + "-" + std::to_string(getpid());
  if (auto r = grex::dpdk::eal_init(eo); !r.ok()) {
    std::fprintf(stderr, "dpdk_raw: %s\n", r.error().message().c_str());
    return 1;
  }
  const uint32_t bsize = a.bsize != 0 ? a.bsize : std::max<uint32_t>(2048, (a.size + 1023) / 1024 * 1024 + 1024);
  grex::dpdk::PortOptions po;
  // --role names the receiver (server) and the sender (client). With
  // --zero-copy the receiver takes memif's client side in zero-copy mode
  // (frames land in its own mbufs; needs hugepages, GREX_DPDK_HUGE=1) and the
  // sender serves the socket, so the sender must start first.
  const bool memif_server = (a.role == "server") != a.zero_copy;
  po.devargs = std::string("net_memif0,role=") + (memif_server ? "server" : "client") + ",socket=" + a.socket +
               ",id=0,bsize=" + std::to_string(bsize) + (a.zero_copy ? ",zero-copy=yes" : "") +
               (a.rsize != 0 ? ",rsize=" + std::to_string(a.rsize) : "");
  po.mtu = static_cast<uint16_t>(std::clamp<uint32_t>(a.size - frame::kEthHeaderBytes, 68, 9000));
  auto port = Port::open(po);
  if (!port.ok()) {
    std::fprintf(stderr, "dpdk_raw: %s\n", port.error().message().c_str());
    return 1;
  }
  const int rc = a.role == "server" ? run_server(a, **port) : run_client(a, **port);
  (*port)->stop();
  return rc;
}
