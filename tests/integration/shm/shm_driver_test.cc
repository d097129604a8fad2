// SPDX-License-Identifier: Apache-2.0
// What the shm driver does beyond the transport contract (that is checked by
// tests/integration/conformance): which copy path large messages, writes and
// reads take (the sender's memfd mapping or CMA, by counters), one post
// taking 3000 requests at queue depth 4096, regions a peer forged or never
// mapped, and the driver registry's errors. Across real
// processes; payloads are checked by checksum.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "core/clock.h"
#include "harness.h"

namespace grex::test {
namespace {

const size_t kSizes[] = {0, 1, 7, 8128, 8129, 65536, (1u << 20) + 3, 64u << 20};

// Rank 0 sends every size from `use_alloc` memory (mapped path) or malloc
// memory (CMA path); rank 1 receives and compares checksums.
int sizes_rank(Rank& r, bool use_alloc) {
  auto link = open_link(r, use_alloc ? "sz-alloc" : "sz-malloc");
  RANK_OK(link);
  Device& dev = *link->dev;
  size_t total = 0;
  for (size_t s : kSizes) total += s;
  MemoryRegion* mr = nullptr;
  std::vector<uint8_t> heap;
  if (use_alloc) {
    auto a = dev.allocate(total);
    RANK_OK(a);
    mr = *a;
  } else {
    heap.resize(total);
    auto reg = dev.register_memory(heap.data(), heap.size());
    RANK_OK(reg);
    mr = *reg;
  }
  RANK_CHECK(dev.capabilities().allocate_shared);
  auto* base = static_cast<uint8_t*>(mr->addr());
  std::vector<Completion> done;
  size_t off = 0;
  if (r.rank == 0) {
    std::vector<SendRequest> reqs;
    for (size_t i = 0; i < std::size(kSizes); ++i) {
      fill(base + off, kSizes[i], i);
      reqs.push_back({mr, off, kSizes[i], 100 + i, i});
      off += kSizes[i];
    }
    PostResult pr = link->to(1).post_send(reqs);
    RANK_CHECK(pr.count == reqs.size());
    RANK_CHECK(drain(dev, reqs.size(), &done));
    for (auto& c : done) RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kSend);
  } else {
    std::vector<RecvRequest> reqs;
    for (size_t i = 0; i < std::size(kSizes); ++i) {
      std::memset(base + off, 0xee, kSizes[i]);
      reqs.push_back({mr, off, kSizes[i], 100 + i, i});
      off += kSizes[i];
    }
    RANK_CHECK(link->to(0).post_recv(reqs).count == reqs.size());
    RANK_CHECK(drain(dev, reqs.size(), &done));
    std::vector<uint8_t> want;
    for (auto& c : done) {
      RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kRecv && c.peer == 0);
      size_t i = c.context;
      RANK_CHECK(c.bytes == kSizes[i] && c.tag == 100 + i);
      want.resize(kSizes[i]);
      fill(want.data(), want.size(), i);
      RANK_CHECK(checksum(base + reqs[i].offset, kSizes[i]) == checksum(want.data(), want.size()));
    }
    // Counters tell which path the large messages took.
    uint64_t big = 0, total_rx = 0;
    for (size_t sz : kSizes) {
      total_rx += sz;
      if (sz > 8128) big += sz;
    }
    uint64_t mapped = 0, cma = 0, received = 0;
    for (auto& [name, v] : dev.counters()) {
      if (name == "mapped_bytes") mapped = v;
      if (name == "cma_bytes") cma = v;
      if (name == "bytes_received") received = v;
    }
    RANK_CHECK(received == total_rx);
    RANK_CHECK((use_alloc ? mapped : cma) == big);
    RANK_CHECK((use_alloc ? cma : mapped) == 0);
  }
  RANK_OK(r.bootstrap->barrier("sz-done"));
  return 0;
}

TEST(ShmDriver, SizesFromUserMemoryOverCma) {
  auto res = run_ranks(2, [](Rank& r) { return sizes_rank(r, false); });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(ShmDriver, SizesFromAllocatedMemoryOverMapping) {
  auto res = run_ranks(2, [](Rank& r) { return sizes_rank(r, true); });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// With a queue depth of 4096, one post takes 3000 sends (and one 3000
// receives) whole: 3000 messages of varied size in flight at once on 4 tags;
// within a tag they arrive in order (payload carries its sequence number).
TEST(ShmDriver, ManyInFlightKeepPerTagOrder) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    DeviceOptions o;
    o.queue_depth = 4096;
    auto link = open_link(r, "many", o);
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kMsgs = 3000, kMax = 20000;
    auto a = dev.allocate(kMsgs * kMax);
    RANK_OK(a);
    auto* base = static_cast<uint8_t*>((*a)->addr());
    auto size_of = [](size_t i) { return 8 + (i * 7919) % (kMax - 8); };
    std::vector<Completion> done;
    if (r.rank == 0) {
      std::vector<SendRequest> reqs;
      for (size_t i = 0; i < kMsgs; ++i) {
        uint64_t seq = i / 4;
        std::memcpy(base + i * kMax, &seq, 8);
        fill(base + i * kMax + 8, size_of(i) - 8, i);
        reqs.push_back({*a, i * kMax, size_of(i), i % 4, i});
      }
      RANK_CHECK(link->to(1).post_send(reqs).count == kMsgs);
      RANK_CHECK(drain(dev, kMsgs, &done));
    } else {
      std::vector<RecvRequest> reqs;
      for (size_t i = 0; i < kMsgs; ++i) reqs.push_back({*a, i * kMax, kMax, i % 4, i});
      RANK_CHECK(link->to(0).post_recv(reqs).count == kMsgs);
      RANK_CHECK(drain(dev, kMsgs, &done));
      std::vector<uint8_t> want(kMax);
      for (auto& c : done) {
        RANK_CHECK(c.status == Status::kSuccess);
        size_t i = c.context;
        uint64_t seq;
        std::memcpy(&seq, base + i * kMax, 8);
        RANK_CHECK(seq == i / 4);  // i-th receive on tag i%4 got the i/4-th send on that tag
        RANK_CHECK(c.bytes == size_of(i));
        fill(want.data(), c.bytes - 8, i);
        RANK_CHECK(std::memcmp(base + i * kMax + 8, want.data(), c.bytes - 8) == 0);
      }
    }
    RANK_OK(r.bootstrap->barrier("many-done"));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Rank 1 advertises an allocated and a malloc'd region; rank 0 writes into
// both with immediates; rank 1 sees kRemoteWrite completions and the bytes.
TEST(ShmDriver, WriteWithImmediate) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "wimm");
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kLen = (1u << 20) + 17;
    auto shared = dev.allocate(2 * kLen);
    RANK_OK(shared);
    std::vector<uint8_t> heap(2 * kLen);
    auto hreg = dev.register_memory(heap.data(), heap.size());
    RANK_OK(hreg);
    RemoteRegion mine[2] = {(*shared)->remote(), (*hreg)->remote()};
    auto all = r.bootstrap->all_gather("wimm/regions", std::string(reinterpret_cast<char*>(mine), sizeof(mine)));
    RANK_OK(all);
    std::vector<Completion> done;
    if (r.rank == 0) {
      RemoteRegion theirs[2];
      std::memcpy(theirs, (*all)[1].data(), sizeof(theirs));
      auto* src = static_cast<uint8_t*>((*shared)->addr());
      fill(src, kLen, 42);
      // A region that claims memory the target never mapped: the write must
      // fail with kRemoteAccess and leave the connection usable.
      RemoteRegion bogus = theirs[1];
      bogus.addr = 0x10000;  // below any mapping
      bogus.rkey &= 0xffff'ffffull;  // no memfd: forces the CMA path
      WriteRequest w[4] = {{*shared, 0, kLen, theirs[0], kLen, 42, true, 1},
                           {*shared, 0, kLen, theirs[1], 3, 43, true, 2},
                           {*shared, 0, 16, theirs[1], 2 * kLen - 8, 44, true, 3},  // out of range
                           {*shared, 0, 16, bogus, 0, 45, true, 4}};               // unmapped target
      RANK_CHECK(link->to(1).post_write(w).count == 4);
      RANK_CHECK(drain(dev, 4, &done));
      for (auto& c : done) {
        RANK_CHECK(c.op == Op::kWrite);
        RANK_CHECK((c.context >= 3) == (c.status == Status::kRemoteAccess));
      }
      RANK_CHECK(!link->to(1).peer_failed());
    } else {
      RANK_CHECK(drain(dev, 2, &done));
      std::vector<uint8_t> want(kLen);
      fill(want.data(), kLen, 42);
      for (auto& c : done) {
        RANK_CHECK(c.op == Op::kRemoteWrite && c.status == Status::kSuccess && c.bytes == kLen);
        RANK_CHECK(c.imm == 42 || c.imm == 43);
      }
      RANK_CHECK(std::memcmp(static_cast<uint8_t*>((*shared)->addr()) + kLen, want.data(), kLen) == 0);
      RANK_CHECK(std::memcmp(heap.data() + 3, want.data(), kLen) == 0);
    }
    RANK_OK(r.bootstrap->barrier("wimm-done"));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// One-sided reads from a peer's allocated region (through its mapping) and
// from its registered heap memory (process_vm_readv); a read past the end of
// the region or from memory the peer never mapped fails with kRemoteAccess
// and leaves the connection usable. The peer is not told of any read.
TEST(ShmDriver, OneSidedRead) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "read");
    RANK_OK(link);
    Device& dev = *link->dev;
    RANK_CHECK(dev.capabilities().read);
    constexpr size_t kLen = (1u << 20) + 17;
    auto shared = dev.allocate(2 * kLen);
    RANK_OK(shared);
    std::vector<uint8_t> heap(2 * kLen);
    auto hreg = dev.register_memory(heap.data(), heap.size());
    RANK_OK(hreg);
    fill(static_cast<uint8_t*>((*shared)->addr()), 2 * kLen, 50 + r.rank);
    fill(heap.data(), heap.size(), 60 + r.rank);
    RemoteRegion mine[2] = {(*shared)->remote(), (*hreg)->remote()};
    auto all = r.bootstrap->all_gather("read/regions", std::string(reinterpret_cast<char*>(mine), sizeof(mine)));
    RANK_OK(all);
    if (r.rank == 0) {
      RemoteRegion theirs[2];
      std::memcpy(theirs, (*all)[1].data(), sizeof(theirs));
      RemoteRegion bogus = theirs[1];
      bogus.addr = 0x10000;
      bogus.rkey &= 0xffff'ffffull;
      std::vector<uint8_t> dst(2 * kLen + 64, 0);
      auto dreg = dev.register_memory(dst.data(), dst.size());
      RANK_OK(dreg);
      ReadRequest rd[4] = {{*dreg, 0, kLen, theirs[0], 5, 1},
                           {*dreg, kLen, kLen, theirs[1], 7, 2},
                           {*dreg, 0, 16, theirs[1], 2 * kLen - 8, 3},  // past the end
                           {*dreg, 0, 16, bogus, 0, 4}};                // unmapped
      RANK_CHECK(link->to(1).post_read(rd).count == 4);
      std::vector<Completion> done;
      RANK_CHECK(drain(dev, 4, &done));
      for (auto& c : done) {
        RANK_CHECK(c.op == Op::kRead);
        RANK_CHECK((c.context >= 3) == (c.status == Status::kRemoteAccess));
        if (c.context < 3) RANK_CHECK(c.bytes == kLen);
      }
      std::vector<uint8_t> want(2 * kLen);
      fill(want.data(), want.size(), 51);
      RANK_CHECK(std::memcmp(dst.data(), want.data() + 5, kLen) == 0);
      fill(want.data(), want.size(), 61);
      RANK_CHECK(std::memcmp(dst.data() + kLen, want.data() + 7, kLen) == 0);
      RANK_CHECK(!link->to(1).peer_failed());
      RANK_OK(dev.deregister_memory(*dreg));
    }
    RANK_OK(r.bootstrap->barrier("read-done"));
    Completion c[4];
    RANK_CHECK(dev.poll(c) == 0);  // reads raise nothing on the target
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(ShmDriver, UnknownAndUnbuiltDriversNameTheAlternatives) {
  DeviceOptions o;
  o.driver = "nosuch";
  o.job_id = "x";
  auto d = Device::open(o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code(), Errc::kNotFound);
  EXPECT_NE(d.error().message().find("shm"), std::string::npos) << d.error().message();
  o.driver = "shm";
  o.job_id = "";
  auto e = Device::open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), Errc::kInvalidArgument);
}

}  // namespace
}  // namespace grex::test
