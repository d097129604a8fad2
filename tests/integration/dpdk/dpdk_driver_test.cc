// SPDX-License-Identifier: Apache-2.0
// What the DPDK driver does beyond the transport contract (that is checked by
// tests/integration/conformance): messages up to 256 MiB, injected loss /
// duplication / reordering / corruption, junk datagrams, the smallest TX
// backlog, a peer killed mid-message (also in memif zero-copy mode). Between two real
// processes over net_memif; payloads are checked by checksum. Skips (with the
// reason) where libgrex was built without DPDK.
#include <gtest/gtest.h>

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "../shm/harness.h"
#include "hugepages.h"

namespace grex::test {
namespace {

bool have_dpdk() {
  for (const auto& d : Device::available_drivers())
    if (d == "dpdk") return true;
  return false;
}

#define REQUIRE_DPDK() \
  if (!have_dpdk()) GTEST_SKIP() << "libgrex was built without DPDK (install libdpdk-dev and reconfigure)"

DeviceOptions dpdk_opts(const std::string& faults = "", int64_t give_up_ms = 10'000, int tx_backlog = 0) {
  DeviceOptions o;
  if (tx_backlog > 0) o.params["tx_backlog"] = std::to_string(tx_backlog);
  o.driver = "dpdk";
  o.queue_depth = 2048;
  if (!faults.empty()) o.params["faults"] = faults;
  o.params["give_up_ms"] = std::to_string(give_up_ms);
  o.params["memif_dir"] = "/tmp";
  return o;
}

int counter(Device& dev, const char* name) {
  for (auto& [k, v] : dev.counters())
    if (k == name) return static_cast<int>(v);
  return -1;
}

// More for exchange(): driver parameters, and checks each side runs on its
// device once every message completed (0: passed).
struct ExchangeMore {
  std::map<std::string, std::string> params;
  std::function<int(Device&)> sender, receiver;
};

// Rank 0 sends `sizes` on tags 0..3 from one registered buffer; rank 1
// receives and compares checksums.
int exchange(Rank& r, const char* name, const std::vector<size_t>& sizes, const std::string& faults,
             int tx_backlog = 0, const ExchangeMore& more = {}) {
  DeviceOptions o = dpdk_opts(faults, 10'000, tx_backlog);
  for (const auto& [k, v] : more.params) o.params[k] = v;
  auto link = open_link(r, name, o);
  RANK_OK(link);
  Device& dev = *link->dev;
  size_t total = 0;
  for (size_t s : sizes) total += s;
  std::vector<uint8_t> buf(total + 1);
  auto mr = dev.register_memory(buf.data(), buf.size());
  RANK_OK(mr);
  std::vector<Completion> done;
  if (r.rank == 0) {
    std::vector<SendRequest> reqs;
    for (size_t i = 0, off = 0; i < sizes.size(); off += sizes[i], ++i) {
      fill(buf.data() + off, sizes[i], i);
      reqs.push_back({*mr, off, sizes[i], i % 4, i});
    }
    RANK_CHECK(link->to(1).post_send(reqs).count == reqs.size());
    RANK_CHECK(drain(dev, reqs.size(), &done, 120'000));
    for (auto& c : done) {
      if (c.status != Status::kSuccess || c.op != Op::kSend)
        std::fprintf(stderr, "send %llu: op %d status %s\n", static_cast<unsigned long long>(c.context),
                     static_cast<int>(c.op), std::string(status_name(c.status)).c_str());
      RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kSend);
    }
    if (more.sender && more.sender(dev) != 0) return 1;
  } else {
    std::vector<RecvRequest> reqs;
    for (size_t i = 0, off = 0; i < sizes.size(); off += sizes[i], ++i) reqs.push_back({*mr, off, sizes[i], i % 4, i});
    RANK_CHECK(link->to(0).post_recv(reqs).count == reqs.size());
    RANK_CHECK(drain(dev, reqs.size(), &done, 120'000));
    std::vector<uint8_t> want;
    for (auto& c : done) {
      RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kRecv);
      size_t i = c.context;
      RANK_CHECK(c.bytes == sizes[i] && c.tag == i % 4);
      want.resize(sizes[i]);
      fill(want.data(), sizes[i], i);
      RANK_CHECK(checksum(buf.data() + reqs[i].offset, sizes[i]) == checksum(want.data(), sizes[i]));
    }
    if (!faults.empty() && faults.find("garbage") != std::string::npos)
      RANK_CHECK(counter(dev, "rx_bad_frame") + counter(dev, "rx_bad_header") > 0);
    if (!faults.empty() && faults.find("drop") != std::string::npos) RANK_CHECK(counter(dev, "duplicates") >= 0);
    if (more.receiver && more.receiver(dev) != 0) return 1;
  }
  // Close the connection the way a job ends: the CLOSE exchange carries the
  // final ACKs (which a lossy network may have dropped) to the sender.
  (void)dev.deregister_memory(*mr);
  link->eps.clear();
  link->dev.reset();
  return 0;
}

// Issue 31: over paths that reorder (packets sprayed over ECMP paths), a
// third of the packets held back behind up to 16 later ones and none lost.
// With GREX_DPDK_REORDER=16 the flow takes that for reordering, not loss: every
// byte arrives once and only the tail is resent (7-16 packets in 8 runs).
// Without it (the in-order default; GREX_DPDK_REORDER=0 in the environment
// overrides the test's 16) every gap reads as a loss: 80-86 resent, and the
// test fails.
// `lossy`: the sender's share of data packets on path 2 (out: with paths > 2).
int reordered(Rank& r, const char* name, uint32_t reorder, uint64_t* resent, uint32_t paths = 1,
              const char* faults = "reorder=0.3,window=16,seed=8", const char* spray = "rr", double* lossy = nullptr) {
  ExchangeMore more;
  more.params = {{"reorder", std::to_string(reorder)}, {"paths", std::to_string(paths)}, {"spray", spray}};
  more.sender = [&](Device& dev) {
    *resent = static_cast<uint64_t>(counter(dev, "retransmits"));
    if (lossy != nullptr && paths > 2) {
      double all = 0;
      for (uint32_t i = 0; i < paths; ++i) all += counter(dev, ("peer.1.tx_path." + std::to_string(i)).c_str());
      *lossy = counter(dev, "peer.1.tx_path.2") / std::max(all, 1.0);
      std::fprintf(stderr, "%.0f data packets: %d on fresh paths, %d paths recycled, %d re-probes; slow marks",
                   all, counter(dev, "peer.1.paths_explored"), counter(dev, "peer.1.paths_recycled"),
                   counter(dev, "peer.1.paths_reprobed"));
      for (uint32_t i = 0; i < paths; ++i)
        std::fprintf(stderr, " %d (srtt %d us)", counter(dev, ("peer.1.slow_path." + std::to_string(i)).c_str()),
                     counter(dev, ("peer.1.rtt_path_ns." + std::to_string(i)).c_str()) / 1000);
      std::fprintf(stderr, "; tolerance %d\n", counter(dev, "peer.1.reorder_tolerance"));
    }
    return 0;
  };
  more.receiver = [&](Device& dev) {
    // The source ports the peer's packets came from: each of its paths.
    RANK_CHECK(counter(dev, "peer.0.rx_paths") == static_cast<int>(paths));
    return 0;
  };
  return exchange(r, name, std::vector<size_t>(paths > 2 ? 256 : 64, 256 * 1024), faults, 0, more);
}

TEST(DpdkDriver, ToleratedReorderingIsNotResent) {
  REQUIRE_DPDK();
  auto res = run_ranks(2, [&](Rank& r) {
    uint64_t resent = 0;
    const int rc = reordered(r, "dreo", 16, &resent);
    if (rc == 0 && r.rank == 0) {
      std::fprintf(stderr, "GREX_DPDK_REORDER=16: %llu packets resent\n", static_cast<unsigned long long>(resent));
      // 16 MiB is about 1900 packets at memif's payload, 600 of them held back. What is
      // resent is the tail: packets held behind later ones that never came (tail probes, RTO).
      RANK_CHECK(resent <= 32);
    }
    return rc;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Issue 31: a flow sprays its data over GREX_DPDK_PATHS UDP source ports (the
// entropy ECMP hashes); the receiver takes its peer's packets from that range
// and counts the paths they came over. With reordering tolerated, as spraying
// needs, every byte arrives once.
TEST(DpdkDriver, DataSpraysOverSourcePorts) {
  REQUIRE_DPDK();
  auto res = run_ranks(2, [&](Rank& r) {
    uint64_t resent = 0;
    const int rc = reordered(r, "dpaths", 16, &resent, 8);
    if (rc == 0 && r.rank == 0) RANK_CHECK(resent <= 32);
    return rc;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Issue 31: one of 4 sprayed paths loses 30 % of what it carries. Round robin
// keeps a quarter of the packets on it; REPS (GREX_DPDK_SPRAY=reps) forgets a
// path whose packet had to be resent and reuses those the ACKs covered, so the
// lossy path carries much less, and is still tried now and then.
TEST(DpdkDriver, RepsUsesALossyPathLess) {
  REQUIRE_DPDK();
  for (const char* spray : {"rr", "reps"}) {
    const bool reps = std::string(spray) == "reps";
    auto res = run_ranks(2, [&](Rank& r) {  // ranks are processes: each checks its own numbers
      uint64_t resent = 0;
      double share = -1;
      const int rc = reordered(r, reps ? "dlreps" : "dlrr", 4, &resent, 4, "path=2,pathdrop=0.3,seed=9", spray, &share);
      if (rc != 0 || r.rank != 0) return rc;
      std::fprintf(stderr, "%s: %.3f of the data packets on the lossy path, %llu resent\n", spray, share,
                   static_cast<unsigned long long>(resent));
      if (reps) {
        // Used less, and re-probed now and then: 0.017-0.078 by loss alone;
        // 0.018-0.128 in 25 runs since REPS also drops paths whose RTT floor
        // stands high, which on memif's one shared queue is noise; 0.023-0.169
        // in 17 runs on a later VM (two above 0.15). Round robin: 0.25.
        RANK_CHECK(share > 0.0 && share < 0.2);
      } else {
        RANK_CHECK(share > 0.22 && share < 0.28);
      }
      return 0;
    }, 120);
    EXPECT_TRUE(res.all_ok()) << spray << ": " << res.describe();
  }
}

// Issue 31: RTTCC with a controller per path (GREX_DPDK_PATH_CC=path) over 4
// sprayed paths that reorder and lose packets: every byte arrives once, each
// path's controller runs (its rate is reported) and carries packets. Which
// path it favours is the fabric's to decide (tests/unit/protocol/paths_test.cc
// models links of different speeds; dpdk_ecmp_netns runs a routed fabric): on
// memif all paths share one queue, and RTTCC, delay-based, does not cut for
// random losses below its target (REPS does, above).
TEST(DpdkDriver, RttccPerPathDeliversEveryByteOnce) {
  REQUIRE_DPDK();
  auto res = run_ranks(2, [&](Rank& r) {
    ExchangeMore more;
    more.params = {{"reorder", "8"}, {"paths", "4"}, {"cc", "rttcc"}, {"path_cc", "path"}};
    more.sender = [&](Device& dev) {
      for (int i = 0; i < 4; ++i) {
        const std::string n = std::to_string(i);
        const int rate = counter(dev, ("peer.1.rate_path_kbps." + n).c_str());
        const int sent = counter(dev, ("peer.1.tx_path." + n).c_str());
        std::fprintf(stderr, "path %d: %d packets, rate %d kbit/s\n", i, sent, rate);
        RANK_CHECK(rate > 0);
        RANK_CHECK(sent > 0);
      }
      return 0;
    };
    return exchange(r, "dpcc", std::vector<size_t>(64, 256 * 1024), "reorder=0.2,window=8,drop=0.01,seed=4", 0, more);
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Beyond the conformance suite's 64 MiB: 256 MiB in one message (32-bit
// packet offsets of 28 bits and more), after a frame-sized pair.
TEST(DpdkDriver, SizesUpTo256MiB) {
  REQUIRE_DPDK();
  auto res = run_ranks(2, [](Rank& r) {
    return exchange(r, "dsz", {8832, 8833, 16u << 20, 256u << 20}, "");
  }, 240);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Issue 28: a memif socket is abstract (no file permissions guard it), so its
// secret, derived from the job key, decides who gets in. A rank with another
// key (same job id) never gets its link up, and says so; with the same key the
// pair connects (SizesUpTo256MiB and every other case here).
TEST(DpdkDriver, MemifPeerWithAnotherKeyIsKeptOut) {
  REQUIRE_DPDK();
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto ids = r.bootstrap->all_gather("mkey/id", std::to_string(::getpid()));
    RANK_OK(ids);
    DeviceOptions o = dpdk_opts();
    o.rank = r.rank;
    o.world_size = 2;
    o.job_id = "mkey-" + (*ids)[0];
    o.job_key = derive_job_key(r.rank == 0 ? "the job's token" : "a stranger's guess", o.job_id);
    o.connect_timeout_ms = 3000;
    auto d = Device::open(o);
    RANK_OK(d);
    auto addrs = r.bootstrap->all_gather("mkey/addr", (*d)->local_address().value());
    RANK_OK(addrs);
    auto ep = (*d)->connect(1 - r.rank, (*addrs)[static_cast<size_t>(1 - r.rank)]);
    RANK_CHECK(!ep.ok());
    std::fprintf(stderr, "rank %d: %s\n", r.rank, ep.error().message().c_str());
    RANK_CHECK(ep.error().code() == Errc::kTimeout);
    RANK_OK(r.bootstrap->barrier("mkey/done"));
    return 0;
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// The smallest TX hand-off (GREX_DPDK_TX_BACKLOG=2: a flow may queue two
// packets for the PMD per pass) still moves everything, with some loss.
TEST(DpdkDriver, SmallestTxBacklogStillMovesEverything) {
  REQUIRE_DPDK();
  auto res = run_ranks(2, [](Rank& r) {
    std::vector<size_t> sizes;
    for (size_t i = 0; i < 300; ++i) sizes.push_back((i * 7919) % 100'000);
    return exchange(r, "dtxb", sizes, "drop=0.005,seed=6", 2);
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

class DpdkLoss : public ::testing::TestWithParam<const char*> {};
TEST_P(DpdkLoss, EveryByteExactlyOnce) {
  REQUIRE_DPDK();
  std::string faults = GetParam();
  auto res = run_ranks(2, [&](Rank& r) {
    std::vector<size_t> sizes;
    for (size_t i = 0; i < 200; ++i) sizes.push_back((i * 104729) % 300'000);
    return exchange(r, "dloss", sizes, faults);
  }, 180);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}
INSTANTIATE_TEST_SUITE_P(Faults, DpdkLoss,
                         ::testing::Values("drop=0.001,dup=0.001,reorder=0.01,seed=1",
                                           "drop=0.01,dup=0.01,reorder=0.02,seed=2",
                                           "drop=0.05,dup=0.01,reorder=0.05,window=16,seed=3",
                                           "corrupt=0.01,drop=0.005,seed=4",
                                           "garbage=0.05,seed=5"),
                         [](const auto& i) { return "case" + std::to_string(i.index); });

// Both ranks send `sizes` to each other at once and check what arrives;
// then each reports its device's counters through `seen`.
int both_ways(Rank& r, const char* name, const std::vector<size_t>& sizes, const std::string& faults,
              std::map<std::string, uint64_t>* seen) {
  DeviceOptions o = dpdk_opts(faults);
  o.params["memif_zero_copy"] = "1";
  auto link = open_link(r, name, o);
  RANK_OK(link);
  Device& dev = *link->dev;
  size_t total = 0;
  for (size_t s : sizes) total += s;
  std::vector<uint8_t> out(total + 1), in(total + 1);
  auto mo = dev.register_memory(out.data(), out.size());
  auto mi = dev.register_memory(in.data(), in.size());
  RANK_OK(mo);
  RANK_OK(mi);
  const int peer = 1 - r.rank;
  std::vector<SendRequest> sends;
  std::vector<RecvRequest> recvs;
  for (size_t i = 0, off = 0; i < sizes.size(); off += sizes[i], ++i) {
    fill(out.data() + off, sizes[i], i * 2 + static_cast<size_t>(r.rank));
    sends.push_back({*mo, off, sizes[i], i % 4, i});
    recvs.push_back({*mi, off, sizes[i], i % 4, i});
  }
  RANK_CHECK(link->to(peer).post_recv(recvs).count == recvs.size());
  RANK_CHECK(link->to(peer).post_send(sends).count == sends.size());
  std::vector<Completion> done;
  RANK_CHECK(drain(dev, 2 * sizes.size(), &done, 120'000));
  std::vector<uint8_t> want;
  for (auto& c : done) {
    RANK_CHECK(c.status == Status::kSuccess);
    if (c.op != Op::kRecv) continue;
    const size_t i = c.context;
    RANK_CHECK(c.bytes == sizes[i] && c.tag == i % 4);
    want.resize(sizes[i]);
    fill(want.data(), sizes[i], i * 2 + static_cast<size_t>(peer));
    RANK_CHECK(checksum(in.data() + recvs[i].offset, sizes[i]) == checksum(want.data(), sizes[i]));
  }
  for (auto& [k, v] : dev.counters()) (*seen)[k] = v;
  (void)dev.deregister_memory(*mo);
  (void)dev.deregister_memory(*mi);
  link->eps.clear();
  link->dev.reset();
  return 0;
}

// memif in zero-copy mode (the client, rank 1, on hugepages; "1" makes the
// device fail without them): every byte arrives both ways, with and without
// injected faults. Rank 1 copies what it sends into its own mbufs (no
// extbufs: its peer could not find them); rank 0 sends zero-copy as always.
class DpdkMemifZeroCopy : public ::testing::TestWithParam<const char*> {};
TEST_P(DpdkMemifZeroCopy, EveryByteBothWays) {
  REQUIRE_DPDK();
  Hugepages huge(256);
  if (!huge.why_not().empty()) GTEST_SKIP() << "memif zero-copy needs hugepages: " << huge.why_not();
  setenv("GREX_DPDK_HUGE", "1", 1);
  std::string faults = GetParam();
  auto res = run_ranks(2, [&](Rank& r) {
    std::vector<size_t> sizes = {0, 1, 7, 8832, 8833, 65536, (1u << 20) + 3, 16u << 20};
    for (size_t i = 0; i < 150; ++i) sizes.push_back((i * 104729) % 300'000);
    std::map<std::string, uint64_t> c;
    if (int rc = both_ways(r, "dzc", sizes, faults, &c); rc != 0) return rc;
    if (r.rank == 1)
      RANK_CHECK(c["zero_copy_tx"] == 0 && c["copied_tx"] > 0);
    else
      RANK_CHECK(c["zero_copy_tx"] > 0);
    return 0;
  }, 240);
  unsetenv("GREX_DPDK_HUGE");
  EXPECT_TRUE(res.all_ok()) << res.describe();
}
INSTANTIATE_TEST_SUITE_P(Faults, DpdkMemifZeroCopy,
                         ::testing::Values("", "drop=0.01,dup=0.01,reorder=0.02,corrupt=0.005,seed=7"),
                         [](const auto& i) { return i.index == 0 ? std::string("clean") : std::string("faults"); });

// `victim` takes part in a 64 MiB transfer for a moment and is killed; the
// survivor's request ends with peer-gone naming it, within 5 s.
void peer_killed_mid_transfer(int victim, bool zero_copy) {
  auto res = run_ranks(2, [&](Rank& r) -> int {
    DeviceOptions o = dpdk_opts("", 1000);
    if (zero_copy) o.params["memif_zero_copy"] = "1";
    auto link = open_link(r, "dkill", o);
    RANK_OK(link);
    Device& dev = *link->dev;
    const int peer = 1 - r.rank;
    std::vector<uint8_t> buf(64u << 20);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    std::vector<Completion> done;
    if (r.rank == victim) {
      RecvRequest q{*mr, 0, buf.size(), 1, 1};
      RANK_CHECK(link->to(peer).post_recv({&q, 1}).count == 1);
      Completion cs[4];
      // Take part until 100 data packets are in (a few of 7600), then die.
      for (int i = 0; i < 1'000'000 && counter(dev, "rx_packets") < 100; ++i) dev.poll(cs);
      ::raise(SIGKILL);
    }
    SendRequest s{*mr, 0, buf.size(), 1, 7};
    RANK_CHECK(link->to(peer).post_send({&s, 1}).count == 1);
    uint64_t t0 = now_ns();
    RANK_CHECK(drain(dev, 1, &done, 30'000));
    uint64_t ms = (now_ns() - t0) / 1'000'000;
    std::fprintf(stderr, "survivor: send ended with %s after %llu ms\n",
                 std::string(status_name(done[0].status)).c_str(), static_cast<unsigned long long>(ms));
    RANK_CHECK(done[0].status == Status::kPeerGone && done[0].peer == peer);
    RANK_CHECK(ms < 5'000);
    RANK_CHECK(link->to(peer).peer_failed());
    RANK_CHECK(link->to(peer).describe_peer().find("rank " + std::to_string(peer)) != std::string::npos);
    return 0;
  }, 60);
  ASSERT_EQ(res.codes.size(), 2u);
  EXPECT_EQ(res.codes[static_cast<size_t>(1 - victim)], 0);
  EXPECT_EQ(res.codes[static_cast<size_t>(victim)], 128 + SIGKILL);
}

// Rank 1 is SIGKILLed after 100 data packets of a 64 MiB message (the
// conformance suite's victim takes part for a time, which memif may outlast):
// rank 0's send fails with kPeerGone once the peer was silent for give_up_ms (1 s here).
TEST(DpdkDriver, PeerKilledMidTransfer) {
  REQUIRE_DPDK();
  peer_killed_mid_transfer(1, false);
}

// In zero-copy mode the server maps the client's own memory: whichever of
// the two dies, the survivor reports it and does not crash.
TEST(DpdkDriver, PeerKilledMidTransferInZeroCopyMode) {
  REQUIRE_DPDK();
  Hugepages huge(256);
  if (!huge.why_not().empty()) GTEST_SKIP() << "memif zero-copy needs hugepages: " << huge.why_not();
  setenv("GREX_DPDK_HUGE", "1", 1);
  peer_killed_mid_transfer(1, true);  // the client
  peer_killed_mid_transfer(0, true);  // the server
  unsetenv("GREX_DPDK_HUGE");
}

}  // namespace
}  // namespace grex::test
