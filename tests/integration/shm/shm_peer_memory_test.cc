// SPDX-License-Identifier: Apache-2.0
// How the shm driver reaches peers' allocate()d memory: mapped once at
// connect (the peer's shared heap), never by poll() or a post, however many
// regions; freed pieces leave every peer's view; a map() pointer outlives the
// peer's free().
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "harness.h"

namespace grex::test {
namespace {

// A device counter; UINT64_MAX when the driver does not report it.
uint64_t counter(const Device& dev, const char* name) {
  for (const auto& [k, v] : dev.counters())
    if (k == name) return v;
  return UINT64_MAX;
}

// Mappings of the shm driver's memfds in this process (its heap, peers'
// heaps and regions): lines of /proc/self/maps naming one.
int memfd_mappings() {
  std::ifstream f("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(f, line);)
    if (line.find("memfd:grex-shm") != std::string::npos) ++n;
  return n;
}

// Shared memory of this process resident in its page tables (RssShmem), in bytes.
uint64_t rss_shmem() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("RssShmem:", 0) == 0) return std::stoull(line.substr(9)) * 1024;
  return 0;
}

template <class T>
std::string bytes_of(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <class T>
T from_bytes(const std::string& s) {
  T v{};
  std::memcpy(&v, s.data(), sizeof(v));
  return v;
}

// Polls until `done` holds `want` completions (it may get more), all
// successful. `done` is reserved, so the loop below allocates nothing that mmap()s.
bool drain_ok(Device& dev, size_t want, std::vector<Completion>* done) {
  if (!drain(dev, want, done)) return false;
  for (const Completion& c : *done)
    if (c.status != Status::kSuccess) {
      std::fprintf(stderr, "op %d context %llu: %s\n", static_cast<int>(c.op),
                   static_cast<unsigned long long>(c.context), std::string(status_name(c.status)).c_str());
      return false;
    }
  return true;
}

// Regions are allocated after connect and exchanged like any descriptor;
// then rendezvous sends, one-sided reads and writes with immediate, both
// ways, many rounds. No mapping of peer memory appears meanwhile: the
// driver's counter stands still and /proc/self/maps gains no memfd mapping
// (the old driver mapped each peer region inside poll the first time a
// message touched it), and every byte moved through a mapping (no CMA).
TEST(ShmPeerMemory, SteadyStateMapsNothing) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "pm-steady");
    RANK_OK(link);
    Device& dev = *link->dev;
    Endpoint& ep = link->to(1 - r.rank);
    constexpr size_t kMsg = (1u << 20) + 64;  // rendezvous (larger than a slot)
    constexpr int kRounds = 40;
    auto src = dev.allocate(kMsg);
    auto dst = dev.allocate(kMsg);
    auto target = dev.allocate(2 * kMsg);  // peers read [0, kMsg) and write [kMsg, 2 kMsg)
    RANK_OK(src);
    RANK_OK(dst);
    RANK_OK(target);
    auto* t = static_cast<uint8_t*>((*target)->addr());
    fill(t, kMsg, 500 + r.rank);
    auto all = r.bootstrap->all_gather("pm-steady/regions", bytes_of((*target)->remote()));
    RANK_OK(all);
    const auto theirs = from_bytes<RemoteRegion>((*all)[static_cast<size_t>(1 - r.rank)]);
    std::vector<Completion> done;
    done.reserve(64);
    std::vector<uint8_t> want(kMsg);
    fill(want.data(), kMsg, 500 + (1 - r.rank));
    const uint64_t want_sum = checksum(want.data(), kMsg);

    const uint64_t mmaps_before = counter(dev, "peer_mmaps");
    const uint64_t cma_before = counter(dev, "cma_bytes");
    const uint64_t mapped_before = counter(dev, "mapped_bytes");
    const int vmas_before = memfd_mappings();
    auto* s = static_cast<uint8_t*>((*src)->addr());
    auto* d = static_cast<uint8_t*>((*dst)->addr());
    for (int round = 0; round < kRounds; ++round) {
      done.clear();
      // Two-sided: each rank sends kMsg to the other (the receiver copies).
      std::memset(s, round + r.rank, kMsg);
      const RecvRequest rv{*dst, 0, kMsg, 7, 1};
      const SendRequest sd{*src, 0, kMsg, 7, 2};
      RANK_CHECK(ep.post_recv({&rv, 1}).count == 1);
      RANK_CHECK(ep.post_send({&sd, 1}).count == 1);
      RANK_CHECK(drain_ok(dev, 2, &done));
      // The receive is among the first two (the peer writes into us only
      // after its send completed, which needs our copy).
      RANK_CHECK(done[0].op == Op::kRecv || done[1].op == Op::kRecv);
      RANK_CHECK(d[0] == static_cast<uint8_t>(round + 1 - r.rank) && d[kMsg - 1] == d[0]);
      // One-sided: read the peer's [0, kMsg), write our src into its [kMsg, 2 kMsg).
      const ReadRequest rd{*dst, 0, kMsg, theirs, 0, 3};
      const WriteRequest wr{*src, 0, kMsg, theirs, kMsg, static_cast<uint32_t>(round), true, 4};
      RANK_CHECK(ep.post_read({&rd, 1}).count == 1);
      RANK_CHECK(ep.post_write({&wr, 1}).count == 1);
      // Then our read and write, and the peer's write into us (kRemoteWrite).
      RANK_CHECK(drain_ok(dev, 5, &done));
      RANK_CHECK(checksum(d, kMsg) == want_sum);
      RANK_CHECK(t[kMsg] == static_cast<uint8_t>(round + 1 - r.rank));
      RANK_OK(r.bootstrap->barrier("pm-steady/round"));  // the peer saw our write before we overwrite src
    }
    const int vmas_after = memfd_mappings();
    const uint64_t mmaps_after = counter(dev, "peer_mmaps");
    if (vmas_after != vmas_before || mmaps_before == UINT64_MAX || mmaps_after != mmaps_before) {
      std::fprintf(stderr, "rank %d: peer memory mapped during the loop: memfd mappings %d -> %d, peer_mmaps %llu -> %llu\n",
                   r.rank, vmas_before, vmas_after, static_cast<unsigned long long>(mmaps_before),
                   static_cast<unsigned long long>(mmaps_after));
      return 1;
    }
    RANK_CHECK(counter(dev, "cma_bytes") == cma_before);
    // Per round: the rendezvous message, the read, the write.
    RANK_CHECK(counter(dev, "mapped_bytes") - mapped_before == uint64_t{3} * kMsg * kRounds);
    RANK_OK(r.bootstrap->barrier("pm-steady/done"));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// More peer regions than the old driver kept mapped (64, least recently
// used evicted, so every read past them opened, mapped and unmapped): rank 0
// reads 100 regions of rank 1 round robin, three passes, with no mapping
// made and no byte through CMA. Prints the time per read.
TEST(ShmPeerMemory, ManyPeerRegionsMapNothing) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "pm-many");
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr int kRegions = 100;
    constexpr size_t kLen = 16384;
    if (r.rank == 1) {
      std::string descs;
      std::vector<MemoryRegion*> mine;
      for (int i = 0; i < kRegions; ++i) {
        auto a = dev.allocate(kLen);
        RANK_OK(a);
        std::memset((*a)->addr(), i, kLen);
        mine.push_back(*a);
        descs += bytes_of((*a)->remote());
      }
      RANK_OK(r.bootstrap->all_gather("pm-many/regions", descs));
      RANK_OK(r.bootstrap->barrier("pm-many/read"));
      for (MemoryRegion* m : mine) RANK_OK(dev.free(m));
    } else {
      auto all = r.bootstrap->all_gather("pm-many/regions", "");
      RANK_OK(all);
      const std::string& descs = (*all)[1];
      RANK_CHECK(descs.size() == kRegions * sizeof(RemoteRegion));
      std::vector<uint8_t> buf(kLen);
      auto reg = dev.register_memory(buf.data(), buf.size());
      RANK_OK(reg);
      std::vector<Completion> done;
      done.reserve(64);
      const uint64_t mmaps = counter(dev, "peer_mmaps");
      const uint64_t cma = counter(dev, "cma_bytes");
      const int vmas = memfd_mappings();
      const uint64_t t0 = now_ns();
      for (int pass = 0; pass < 3; ++pass)
        for (int i = 0; i < kRegions; ++i) {
          RemoteRegion rr;
          std::memcpy(&rr, descs.data() + i * sizeof(RemoteRegion), sizeof(rr));
          const ReadRequest rd{*reg, 0, kLen, rr, 0, static_cast<uint64_t>(i)};
          done.clear();
          RANK_CHECK(link->to(1).post_read({&rd, 1}).count == 1);
          RANK_CHECK(drain_ok(dev, 1, &done));
          RANK_CHECK(buf[0] == static_cast<uint8_t>(i) && buf[kLen - 1] == static_cast<uint8_t>(i));
        }
      const uint64_t t1 = now_ns();
      std::printf("%d reads of 16 KiB from %d peer regions: %.2f us per read\n", 3 * kRegions, kRegions,
                  static_cast<double>(t1 - t0) / 1e3 / (3 * kRegions));
      if (memfd_mappings() != vmas || mmaps == UINT64_MAX || counter(dev, "peer_mmaps") != mmaps) {
        std::fprintf(stderr, "rank 0: memfd mappings %d -> %d during the reads\n", vmas, memfd_mappings());
        return 1;
      }
      RANK_CHECK(counter(dev, "cma_bytes") == cma);
      RANK_OK(dev.deregister_memory(*reg));
      RANK_OK(r.bootstrap->barrier("pm-many/read"));
    }
    RANK_OK(r.bootstrap->barrier("pm-many/done"));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Rank 0 reads all of rank 1's 32 MiB region (its pages become resident in
// rank 0's view); rank 1 frees it; the pages leave rank 0's view too, while
// both endpoints stay open, and rank 1's heap has them back.
TEST(ShmPeerMemory, FreedRegionLeavesThePeersView) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "pm-free");
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kLen = 32u << 20;
    const uint64_t in_use = counter(dev, "heap_bytes_in_use");
    if (r.rank == 1) {
      auto big = dev.allocate(kLen);
      RANK_OK(big);
      fill(static_cast<uint8_t*>((*big)->addr()), kLen, 9);
      RANK_OK(r.bootstrap->all_gather("pm-free/region", bytes_of((*big)->remote())));
      RANK_OK(r.bootstrap->barrier("pm-free/read"));
      RANK_OK(dev.free(*big));
      RANK_OK(r.bootstrap->barrier("pm-free/freed"));
      RANK_CHECK(in_use != UINT64_MAX && counter(dev, "heap_bytes_in_use") == in_use);
    } else {
      auto all = r.bootstrap->all_gather("pm-free/region", "");
      RANK_OK(all);
      const auto theirs = from_bytes<RemoteRegion>((*all)[1]);
      std::vector<uint8_t> buf(kLen);
      auto reg = dev.register_memory(buf.data(), buf.size());
      RANK_OK(reg);
      const ReadRequest rd{*reg, 0, kLen, theirs, 0, 1};
      RANK_CHECK(link->to(1).post_read({&rd, 1}).count == 1);
      std::vector<Completion> done;
      RANK_CHECK(drain_ok(dev, 1, &done));
      std::vector<uint8_t> want(kLen);
      fill(want.data(), kLen, 9);
      RANK_CHECK(std::memcmp(buf.data(), want.data(), kLen) == 0);
      const uint64_t resident = rss_shmem();
      RANK_OK(r.bootstrap->barrier("pm-free/read"));
      RANK_OK(r.bootstrap->barrier("pm-free/freed"));
      const uint64_t after = rss_shmem();
      if (after + kLen * 3 / 4 > resident) {
        std::fprintf(stderr, "rank 0: RssShmem %llu KiB after the read, %llu KiB after the peer freed\n",
                     static_cast<unsigned long long>(resident >> 10), static_cast<unsigned long long>(after >> 10));
        return 1;
      }
      RANK_OK(dev.deregister_memory(*reg));
    }
    RANK_OK(r.bootstrap->barrier("pm-free/done"));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Endpoint::map's pointer stays valid for the endpoint's life: rank 1 frees
// the region rank 0 mapped and allocates again; the new region does not take
// the mapped piece, whose bytes rank 0 still reads. Once rank 0's endpoint
// closes, rank 1 reuses the piece.
TEST(ShmPeerMemory, MappedRegionOutlivesThePeersFree) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "pm-map");
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kLen = 1u << 20;
    if (r.rank == 1) {
      const uint64_t in_use = counter(dev, "heap_bytes_in_use");
      auto a = dev.allocate(kLen);
      RANK_OK(a);
      std::memset((*a)->addr(), 0x5a, kLen);
      RANK_OK(r.bootstrap->all_gather("pm-map/region", bytes_of((*a)->remote())));
      RANK_OK(r.bootstrap->barrier("pm-map/mapped"));
      void* old_addr = (*a)->addr();
      RANK_OK(dev.free(*a));
      auto b = dev.allocate(kLen);
      RANK_OK(b);
      RANK_CHECK((*b)->addr() != old_addr);  // the mapped piece is not reused
      std::memset((*b)->addr(), 0xa5, kLen);
      RANK_OK(r.bootstrap->barrier("pm-map/reallocated"));
      RANK_OK(r.bootstrap->barrier("pm-map/closed"));
      RANK_OK(dev.free(*b));  // also returns the piece no one holds now
      RANK_CHECK(counter(dev, "heap_bytes_in_use") == in_use);
    } else {
      auto all = r.bootstrap->all_gather("pm-map/region", "");
      RANK_OK(all);
      auto m = link->to(1).map(from_bytes<RemoteRegion>((*all)[1]));
      RANK_OK(m);
      auto* p = static_cast<const uint8_t*>(*m);
      RANK_CHECK(p[0] == 0x5a && p[kLen - 1] == 0x5a);
      RANK_OK(r.bootstrap->barrier("pm-map/mapped"));
      RANK_OK(r.bootstrap->barrier("pm-map/reallocated"));
      for (size_t i = 0; i < kLen; i += 4096) RANK_CHECK(p[i] == 0x5a);
      link->eps[1].reset();
      RANK_OK(r.bootstrap->barrier("pm-map/closed"));
    }
    RANK_OK(r.bootstrap->barrier("pm-map/done"));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// A region that does not fit the heap gets a memfd of its own. Without CMA a
// peer cannot read it until it map()s it; from then on reads go through that
// mapping (an entry of the endpoint's imported table), with no new mapping.
TEST(ShmPeerMemory, RegionOutsideTheHeapIsReachedAfterMap) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    DeviceOptions o;
    o.params["heap_bytes"] = std::to_string(64u << 20);
    o.params["cma"] = "0";
    auto link = open_link(r, "pm-outside", o);
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kLen = 96u << 20;  // more than the heap
    if (r.rank == 1) {
      auto big = dev.allocate(kLen);
      RANK_OK(big);
      RANK_CHECK(counter(dev, "heap_bytes_in_use") == 0);
      fill(static_cast<uint8_t*>((*big)->addr()), 4096, 11);
      RANK_OK(r.bootstrap->all_gather("pm-outside/region", bytes_of((*big)->remote())));
      RANK_OK(r.bootstrap->barrier("pm-outside/read"));
      RANK_OK(dev.free(*big));
    } else {
      auto all = r.bootstrap->all_gather("pm-outside/region", "");
      RANK_OK(all);
      const auto theirs = from_bytes<RemoteRegion>((*all)[1]);
      std::vector<uint8_t> buf(4096);
      auto reg = dev.register_memory(buf.data(), buf.size());
      RANK_OK(reg);
      std::vector<Completion> done;
      const ReadRequest rd{*reg, 0, 4096, theirs, 0, 1};
      RANK_CHECK(link->to(1).post_read({&rd, 1}).count == 1);
      RANK_CHECK(drain(dev, 1, &done) && done[0].status == Status::kRemoteAccess);  // no CMA, not mapped
      RANK_OK(link->to(1).map(theirs));
      const uint64_t mmaps = counter(dev, "peer_mmaps");
      for (int i = 0; i < 3; ++i) {
        done.clear();
        RANK_CHECK(link->to(1).post_read({&rd, 1}).count == 1);
        RANK_CHECK(drain_ok(dev, 1, &done));
      }
      RANK_CHECK(counter(dev, "peer_mmaps") == mmaps);
      std::vector<uint8_t> want(4096);
      fill(want.data(), want.size(), 11);
      RANK_CHECK(std::memcmp(buf.data(), want.data(), want.size()) == 0);
      RANK_OK(dev.deregister_memory(*reg));
      RANK_OK(r.bootstrap->barrier("pm-outside/read"));
    }
    RANK_OK(r.bootstrap->barrier("pm-outside/done"));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
}  // namespace grex::test
