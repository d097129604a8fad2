// SPDX-License-Identifier: Apache-2.0
// DPDK plumbing over real PMDs: two forked processes on memif sending 2-segment
// (header + external buffer) frames, external-memory refcounting, EAL arguments.
//
// The gtest process itself never initialises EAL (it can only be done once per
// process): every test that needs DPDK forks children, each with its own EAL,
// file prefix and lcore, and they report one line back through a pipe:
// "ok ...", "skip <reason>" or "fail <reason>".
#include "drivers/dpdk/dpdk_eal.h"
#include "drivers/dpdk/dpdk_extbuf.h"
#include "drivers/dpdk/dpdk_frame.h"
#include "drivers/dpdk/dpdk_port.h"

#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_memory.h>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace grex::dpdk {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kFrames = 1000;       // 2-segment frames (header + extbuf payload)
constexpr int kCopyFrames = 64;     // then single-mbuf copy-mode frames
constexpr size_t kRegionBytes = 64 << 10;
constexpr uint16_t kMaxPayloadBytes = 8000;
constexpr uint16_t kUdpPort = 4791;
constexpr uint64_t kSeed = 0x9e3779b97f4a7c15ull;
constexpr auto kChildTimeout = std::chrono::seconds(90);

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Byte at offset `x` of the client's registered region.
uint8_t region_byte(size_t x) { return uint8_t(splitmix(kSeed ^ x) >> 24); }

/// Payload placement of frame i (seeded per frame): offset and length in the region.
void frame_slice(uint32_t i, uint32_t* off, uint16_t* len) {
  const uint64_t r = splitmix(kSeed + i);
  *len = static_cast<uint16_t>(1 + r % kMaxPayloadBytes);
  *off = static_cast<uint32_t>((r >> 32) % (kRegionBytes - *len));
}

/// App header after UDP: frame index and payload offset, little-endian.
struct AppHeader {
  uint32_t index;
  uint32_t offset;
};
constexpr uint16_t kHdrBytes = frame::kHeadersBytes + sizeof(AppHeader);

frame::FrameAddr flow(const Port& src) {
  frame::FrameAddr a;
  a.src_mac = src.mac();
  a.dst_mac = {0x02, 0, 0, 0, 0, 0x02};
  a.src_ip = 0x0a000001;
  a.dst_ip = 0x0a000002;
  a.src_port = 40000;
  a.dst_port = kUdpPort;
  return a;
}

std::vector<int> usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
  if (out.empty()) out.push_back(0);
  return out;
}

/// Waits up to `timeout` for one byte on fd; true if it came.
bool wait_byte(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
  char c = 0;
  return read(fd, &c, 1) == 1;
}

void send_byte(int fd) {
  const char c = 'D';
  if (write(fd, &c, 1) != 1) perror("write");
}

struct Child {
  pid_t pid = -1;
  int result_fd = -1;
};

/// Forks a child that runs `body` and writes its one-line result to the parent.
Child spawn(const std::function<std::string()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string line = body();
    line += '\n';
    if (write(fds[1], line.data(), line.size()) < 0) perror("write");
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  return {pid, fds[0]};
}

/// Reads the child's line (killing it on timeout) and reaps it.
std::string collect(const Child& c, Clock::time_point deadline) {
  if (c.pid < 0) return "fail fork/pipe failed";
  std::string out;
  char buf[512];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{c.result_fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      kill(c.pid, SIGKILL);
      out = "fail child timed out; partial output: " + out;
      break;
    }
    const ssize_t n = read(c.result_fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(c.result_fd);
  int status = 0;
  waitpid(c.pid, &status, 0);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  if (out.empty())
    out = WIFSIGNALED(status) ? "fail child died with signal " + std::to_string(WTERMSIG(status))
                              : "fail child exited without a result";
  return out;
}

/// Starts EAL in a child; "" on success, else the "skip ..." line.
std::string child_eal(int lcore, const std::string& tag) {
  EalOptions o;
  o.lcore = lcore;
  o.file_prefix = "grex-test-" + tag + "-" + std::to_string(getpid());
  auto r = eal_init(o);
  if (!r.ok()) return "skip EAL cannot start here: " + r.error().message();
  auto again = eal_init(EalOptions{});  // idempotent
  if (!again.ok()) return "fail second eal_init: " + again.error().message();
  return "";
}

// ---------------------------------------------------------------------------
// memif server: receive and check every frame, then the shutdown handshake.

std::string run_server(const std::string& devargs, int lcore, int done_to_client, int done_from_client) {
  if (auto s = child_eal(lcore, "srv"); !s.empty()) return s;
  PortOptions po;
  po.devargs = devargs;
  po.mtu = 9000;
  auto port = Port::open(po);
  if (!port.ok()) return "fail server Port::open: " + port.error().message();
  Port& p = **port;

  std::vector<uint8_t> expect(kRegionBytes);
  for (size_t x = 0; x < kRegionBytes; ++x) expect[x] = region_byte(x);

  int received = 0, bad = 0, multi_seg_rx = 0;
  std::string first_bad;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  rte_mbuf* pkts[32];
  while (received < kFrames + kCopyFrames && Clock::now() < deadline) {
    const uint16_t n = p.rx_burst(pkts, 32);
    for (uint16_t k = 0; k < n; ++k) {
      rte_mbuf* m = pkts[k];
      if (m->nb_segs > 1) ++multi_seg_rx;
      std::string err;
      frame::Parsed parsed;
      const auto* data = rte_pktmbuf_mtod(m, const uint8_t*);
      const auto pe = m->nb_segs == 1 ? frame::parse(data, m->data_len, kUdpPort, &parsed, true)
                                      : frame::ParseError::kShortFrame;
      AppHeader ah{};
      uint32_t off = 0;
      uint16_t len = 0;
      if (pe != frame::ParseError::kOk) {
        err = std::string("parse: ") + frame::parse_error_name(pe);
      } else if (parsed.payload_len < sizeof(AppHeader)) {
        err = "payload shorter than the app header";
      } else {
        std::memcpy(&ah, parsed.payload, sizeof(ah));
        frame_slice(ah.index, &off, &len);
        if (ah.index != static_cast<uint32_t>(received)) {
          err = "frame " + std::to_string(ah.index) + " arrived as #" + std::to_string(received);
        } else if (ah.offset != off || parsed.payload_len != sizeof(AppHeader) + len) {
          err = "frame " + std::to_string(ah.index) + ": slice mismatch";
        } else if (std::memcmp(parsed.payload + sizeof(AppHeader), expect.data() + off, len) != 0) {
          err = "frame " + std::to_string(ah.index) + ": payload bytes differ";
        } else if (parsed.addr.src_ip != 0x0a000001 || parsed.addr.src_port != 40000) {
          err = "frame " + std::to_string(ah.index) + ": wrong source";
        }
      }
      if (!err.empty() && bad++ == 0) first_bad = err;
      ++received;
      rte_pktmbuf_free(m);
    }
  }
  // Shutdown: stop polling, tell the client, wait until it stopped too, then close.
  send_byte(done_to_client);
  const bool client_stopped = wait_byte(done_from_client, std::chrono::seconds(30));
  p.stop();
  if (!client_stopped) return "fail client never confirmed it stopped polling";
  if (received != kFrames + kCopyFrames)
    return "fail server received " + std::to_string(received) + " of " + std::to_string(kFrames + kCopyFrames);
  if (bad != 0) return "fail " + std::to_string(bad) + " bad frames; first: " + first_bad;
  if (multi_seg_rx != 0) return "fail " + std::to_string(multi_seg_rx) + " frames arrived in several mbufs";
  return "ok received " + std::to_string(received);
}

// ---------------------------------------------------------------------------
// memif client: 2-segment frames from a registered malloc'd region, then copy mode.

/// Sends `count` frames starting at index `first`; "" or an error.
std::string send_frames(Port& p, ExternalRegion& region, uint32_t first, int count, bool multi_seg,
                        int* two_seg) {
  uint8_t hdr[kHdrBytes];
  const frame::FrameAddr addr = flow(p);
  auto* base = static_cast<uint8_t*>(region.addr());
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (int i = 0; i < count; i += 32) {
    rte_mbuf* burst[32];
    uint16_t n = 0;
    for (; n < 32 && i + n < count; ++n) {
      const uint32_t idx = first + static_cast<uint32_t>(i + n);
      uint32_t off = 0;
      uint16_t len = 0;
      frame_slice(idx, &off, &len);
      frame::write_headers(hdr, addr, sizeof(AppHeader) + len, !p.tx_ip_cksum());
      const AppHeader ah{idx, off};
      std::memcpy(hdr + frame::kHeadersBytes, &ah, sizeof(ah));
      rte_mbuf* m = build_packet(p.pool(), hdr, kHdrBytes, base + off, len, region.shinfo(), multi_seg);
      if (m == nullptr) {
        rte_pktmbuf_free_bulk(burst, n);
        return "build_packet returned null at frame " + std::to_string(idx);
      }
      if (m->pkt_len != uint32_t{kHdrBytes} + len) {
        rte_pktmbuf_free(m);
        rte_pktmbuf_free_bulk(burst, n);
        return "pkt_len " + std::to_string(m->pkt_len) + " wrong";
      }
      if (m->nb_segs == 2) ++*two_seg;
      p.set_tx_cksum_flags(m);
      burst[n] = m;
    }
    uint16_t sent = 0;
    while (sent < n) {
      sent += p.tx_burst(burst + sent, n - sent);
      if (Clock::now() > deadline) {
        rte_pktmbuf_free_bulk(burst + sent, n - sent);
        return "tx_burst stuck (server not draining?)";
      }
    }
  }
  return "";
}

std::string run_client(const std::string& devargs, int lcore, int done_from_server, int done_to_server) {
  if (auto s = child_eal(lcore, "cli"); !s.empty()) {
    send_byte(done_to_server);  // let the server go
    return s;
  }
  PortOptions po;
  po.devargs = devargs;
  po.mtu = 9000;
  auto port = Port::open(po);
  if (!port.ok()) return "fail client Port::open: " + port.error().message();
  Port& p = **port;
  const auto link_deadline = Clock::now() + std::chrono::seconds(20);
  while (!p.link_up() && Clock::now() < link_deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!p.link_up()) return "fail memif link did not come up in 20 s";

  auto* mem = static_cast<uint8_t*>(std::malloc(kRegionBytes));  // not page-aligned on purpose
  for (size_t x = 0; x < kRegionBytes; ++x) mem[x] = region_byte(x);
  std::string result;
  {
    auto region = ExternalRegion::create(mem, kRegionBytes, p.id());
    if (!region.ok()) return "fail ExternalRegion::create: " + region.error().message();
    if (rte_mem_virt2memseg_list(mem) == nullptr) return "fail region not known to EAL after registering";
    int two_seg = 0;
    std::string err = send_frames(p, **region, 0, kFrames, p.tx_multi_seg(), &two_seg);
    if (err.empty()) err = send_frames(p, **region, kFrames, kCopyFrames, false, &two_seg);
    // Shutdown: the server stops polling first and says so; then we (already
    // not polling) confirm, and both close.
    const bool server_done = wait_byte(done_from_server, std::chrono::seconds(60));
    send_byte(done_to_server);
    if (!err.empty()) {
      result = "fail " + err;
    } else if (!server_done) {
      result = "fail server never finished";
    } else if (p.tx_multi_seg() && two_seg != kFrames) {
      result = "fail only " + std::to_string(two_seg) + " frames were 2-segment";
    } else {
      result = "ok sent " + std::to_string(kFrames + kCopyFrames) + ", " + std::to_string(two_seg) +
               " as header + extbuf" + (p.tx_multi_seg() ? "" : " (port lacks MULTI_SEGS: copy mode)");
    }
  }  // region unregistered while the port is still open (DMA unmap needs it)
  if (rte_mem_virt2memseg_list(mem) != nullptr && result.rfind("ok", 0) == 0)
    result = "fail region still registered after ExternalRegion was destroyed";
  p.stop();
  std::free(mem);
  return result;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/grex-dpdk-test-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void expect_ok_or_skip(const std::string& who, const std::string& line) {
  if (line.rfind("ok", 0) == 0) return;
  ADD_FAILURE() << who << ": " << line;
}

TEST(DpdkPort, MemifTwoProcessesTwoSegmentFrames) {
  ASSERT_FALSE(eal_initialized()) << "the test process itself must not start EAL";
  TempDir dir;
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  const std::vector<int> cpus = usable_cpus();
  const int srv_cpu = cpus[0];
  const int cli_cpu = cpus.size() > 1 ? cpus[1] : cpus[0];
  const std::string sock = dir.path() + "/memif.sock";
  const std::string common = ",socket=" + sock + ",id=0,bsize=10240";

  int s2c[2], c2s[2];
  ASSERT_EQ(pipe(s2c), 0);
  ASSERT_EQ(pipe(c2s), 0);
  Child server = spawn([&] { return run_server("net_memif0,role=server" + common, srv_cpu, s2c[1], c2s[0]); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the server listen first
  Child client = spawn([&] { return run_client("net_memif0,role=client" + common, cli_cpu, s2c[0], c2s[1]); });
  for (int fd : {s2c[0], s2c[1], c2s[0], c2s[1]}) close(fd);

  const auto deadline = Clock::now() + kChildTimeout;
  const std::string srv = collect(server, deadline);
  const std::string cli = collect(client, deadline);
  std::printf("server: %s\nclient: %s\n", srv.c_str(), cli.c_str());
  if (srv.rfind("skip", 0) == 0) GTEST_SKIP() << srv;
  if (cli.rfind("skip", 0) == 0) GTEST_SKIP() << cli;
  expect_ok_or_skip("server", srv);
  expect_ok_or_skip("client", cli);
}

// ---------------------------------------------------------------------------
// External memory bookkeeping and mbuf construction, on net_null in one child.

std::string run_extbuf_checks(int lcore) {
  if (auto s = child_eal(lcore, "ext"); !s.empty()) return s;
  PortOptions po;
  po.devargs = "net_null0";
  auto port = Port::open(po);
  if (!port.ok()) return "fail Port::open(net_null0): " + port.error().message();
  Port& p = **port;
  const uint16_t id = p.id();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto known = [](const void* a) { return rte_mem_virt2memseg_list(a) != nullptr; };

  // Two buffers sharing the middle page of a 3-page block.
  auto* block = static_cast<uint8_t*>(std::aligned_alloc(page, 3 * page));
  uint8_t* a = block;
  uint8_t* b = block + page + page / 2;
  const size_t a_len = page + page / 2, b_len = page + page / 2;
  if (auto r = register_external(a, a_len, id); !r.ok()) return "fail register a: " + r.error().message();
  if (auto r = register_external(b, b_len, id); !r.ok()) return "fail register b (shares a page): " + r.error().message();
  if (auto r = register_external(a + 10, 100, id); !r.ok()) return "fail register inside a: " + r.error().message();
  if (!known(a) || !known(block + page) || !known(block + 2 * page)) return "fail pages not registered";
  unregister_external(a + 10, 100, id);
  unregister_external(a, a_len, id);
  if (!known(block + page) || !known(b)) return "fail b's pages went away with a";
  unregister_external(b, b_len, id);
  if (known(block) || known(block + page) || known(block + 2 * page)) return "fail pages left registered";
  std::free(block);

  // Memory EAL already owns (its heap) is accepted and left alone.
  void* heap = rte_malloc(nullptr, 8192, 0);
  if (auto r = register_external(heap, 8192, id); !r.ok()) return "fail register heap memory: " + r.error().message();
  unregister_external(heap, 8192, id);
  if (!known(heap)) return "fail heap memory lost its memseg list";
  rte_free(heap);

  // Shared info: many attachments at once, no-op free, refcount kept away from 0.
  std::vector<uint8_t> user(4096, 0x5a);
  rte_mbuf_ext_shared_info* shinfo = new_ext_shinfo();
  std::vector<rte_mbuf*> ms;
  for (int i = 0; i < 3000; ++i) {
    rte_mbuf* m = attach_payload(p.pool(), user.data() + i % 100, 100, shinfo);
    if (m == nullptr) return "fail attach_payload returned null at " + std::to_string(i);
    if (rte_pktmbuf_mtod(m, uint8_t*) != user.data() + i % 100 || m->data_len != 100 || !RTE_MBUF_HAS_EXTBUF(m))
      return "fail attached mbuf does not point at user memory";
    ms.push_back(m);
  }
  for (rte_mbuf* m : ms) rte_pktmbuf_free(m);
  if (rte_mbuf_ext_refcnt_read(shinfo) < 0x4000) return "fail shared refcount sank towards 0";
  if (user[0] != 0x5a) return "fail user memory touched";

  // build_packet: 2 segments, copy mode, header only, too large for copy mode.
  uint8_t hdr[64];
  for (int i = 0; i < 64; ++i) hdr[i] = uint8_t(i);
  rte_mbuf* two = build_packet(p.pool(), hdr, 64, user.data(), 1000, shinfo, true);
  if (two == nullptr || two->nb_segs != 2 || two->pkt_len != 1064 || two->data_len != 64 ||
      std::memcmp(rte_pktmbuf_mtod(two, uint8_t*), hdr, 64) != 0 ||
      rte_pktmbuf_mtod(two->next, uint8_t*) != user.data())
    return "fail 2-segment packet malformed";
  rte_pktmbuf_free(two);
  rte_mbuf* one = build_packet(p.pool(), hdr, 64, user.data(), 1000, shinfo, false);
  if (one == nullptr || one->nb_segs != 1 || one->pkt_len != 1064 ||
      std::memcmp(rte_pktmbuf_mtod(one, uint8_t*) + 64, user.data(), 1000) != 0)
    return "fail copy-mode packet malformed";
  rte_pktmbuf_free(one);
  rte_mbuf* h = build_packet(p.pool(), hdr, 64, nullptr, 0, shinfo, true);
  if (h == nullptr || h->nb_segs != 1 || h->pkt_len != 64) return "fail header-only packet malformed";
  rte_pktmbuf_free(h);
  std::vector<uint8_t> big(p.mbuf_bytes());
  if (build_packet(p.pool(), hdr, 64, big.data(), static_cast<uint16_t>(big.size()), shinfo, false) != nullptr)
    return "fail copy mode accepted a payload larger than the mbuf";
  delete_ext_shinfo(shinfo);

  // A second port can be opened and closed next to the first; stop() is idempotent.
  PortOptions po2;
  po2.devargs = "net_null1";
  po2.mbufs = 511;
  auto second = Port::open(po2);
  if (!second.ok()) return "fail second port: " + second.error().message();
  if ((*second)->id() == id) return "fail two ports share an id";
  (*second)->stop();
  (*second)->stop();
  if (rte_mempool_in_use_count(p.pool()) != 0)
    return "fail " + std::to_string(rte_mempool_in_use_count(p.pool())) + " mbufs leaked";
  p.stop();
  return "ok";
}

TEST(DpdkExtbuf, RefcountedRegistrationAndPacketBuilding) {
  Child c = spawn([] { return run_extbuf_checks(usable_cpus()[0]); });
  const std::string line = collect(c, Clock::now() + kChildTimeout);
  std::printf("child: %s\n", line.c_str());
  if (line.rfind("skip", 0) == 0) GTEST_SKIP() << line;
  EXPECT_EQ(line, "ok");
}

// ---------------------------------------------------------------------------
// No EAL needed: argument building and option checks that fail before probing.

TEST(DpdkEal, ArgumentsFromOptionsAndEnvironment) {
  setenv("GREX_DPDK_ARGS", "  --foo   bar ", 1);
  unsetenv("GREX_DPDK_LCORE");
  unsetenv("GREX_DPDK_HUGE");
  EalOptions o;
  o.lcore = 1;
  o.extra_args = {"--x"};
  auto args = eal_args(o);
  ASSERT_TRUE(args.ok()) << args.error().message();
  std::string joined;
  for (const auto& a : *args) joined += a + " ";
  EXPECT_NE(joined.find("--no-huge --no-shconf -m 512 "), std::string::npos) << joined;
  EXPECT_NE(joined.find("--no-pci"), std::string::npos) << joined;
  EXPECT_NE(joined.find("-l 1 "), std::string::npos) << joined;
  EXPECT_NE(joined.find("--file-prefix grex-" + std::to_string(getpid()) + " "), std::string::npos) << joined;
  EXPECT_NE(joined.find("--log-level="), std::string::npos) << joined;
  EXPECT_NE(joined.find("--x --foo bar "), std::string::npos) << "extra args, then GREX_DPDK_ARGS: " << joined;

  setenv("GREX_DPDK_LCORE", "0", 1);
  o.lcore = -1;
  o.vdevs = {"net_null0"};
  args = eal_args(o);
  ASSERT_TRUE(args.ok());
  joined.clear();
  for (const auto& a : *args) joined += a + " ";
  EXPECT_NE(joined.find("-l 0 "), std::string::npos) << joined;
  EXPECT_NE(joined.find("--vdev net_null0 "), std::string::npos) << joined;

  // A real NIC: only that PCI device is taken, instead of --no-pci.
  o.pci_devices = {"0000:3b:00.1,rxq_cqe_comp_en=0"};
  args = eal_args(o);
  ASSERT_TRUE(args.ok());
  joined.clear();
  for (const auto& a : *args) joined += a + " ";
  EXPECT_EQ(joined.find("--no-pci"), std::string::npos) << joined;
  EXPECT_NE(joined.find("-a 0000:3b:00.1,rxq_cqe_comp_en=0 "), std::string::npos) << joined;
  o.pci_devices.clear();
  EXPECT_TRUE(is_pci_devargs("0000:3b:00.1"));
  EXPECT_TRUE(is_pci_devargs("3b:00.1,txq_inline_max=128"));
  EXPECT_FALSE(is_pci_devargs("net_memif0,role=server"));
  EXPECT_FALSE(is_pci_devargs("3b:00.9"));
  EXPECT_FALSE(is_pci_devargs("net_af_xdp0,iface=eth1"));
  EXPECT_EQ(pci_port_name("3b:00.1,x=1"), "0000:3b:00.1");
  EXPECT_EQ(pci_port_name("0000:3b:00.1"), "0000:3b:00.1");

  setenv("GREX_DPDK_LCORE", "many", 1);
  EXPECT_FALSE(eal_args(o).ok()) << "a bad GREX_DPDK_LCORE is an error";
  unsetenv("GREX_DPDK_LCORE");
  unsetenv("GREX_DPDK_ARGS");
  EXPECT_FALSE(eal_initialized());
}

TEST(DpdkPort, OptionErrorsBeforeProbing) {
  PortOptions o;
  o.devargs = "net_memif0,role=server,socket=/nonexistent/x.sock";
  o.mtu = kMaxMtu + 1;  // a frame that no mbuf holds
  auto r = Port::open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Errc::kInvalidArgument);
  o.mtu = 9000;  // default memif bsize 2048 is too small
  r = Port::open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Errc::kInvalidArgument);
  EXPECT_NE(r.error().message().find("bsize="), std::string::npos) << r.error().message();
  o.devargs = "net_af_packet0,iface=lo";
  r = Port::open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("framesz"), std::string::npos) << r.error().message();
  // Frames large enough, but a block that does not hold whole frames: the
  // PMD would misplace every frame past the first block's.
  o.devargs = "net_af_packet0,iface=lo,framesz=17408,blocksz=20480";
  r = Port::open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("not a multiple of framesz"), std::string::npos) << r.error().message();
  EXPECT_FALSE(eal_initialized()) << "option errors must not start EAL";
}

}  // namespace
}  // namespace grex::dpdk
