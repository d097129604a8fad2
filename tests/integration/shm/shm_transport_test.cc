// SPDX-License-Identifier: Apache-2.0
// The shm driver across real processes, through the transport contract only:
// sizes 0 B..64 MiB, many in flight, tag matching, ordering, write-with-imm,
// truncation, peer death. Payloads are checked by checksum.
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

TEST(ShmTransport, SizesFromUserMemoryOverCma) {
  auto res = run_ranks(2, [](Rank& r) { return sizes_rank(r, false); });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(ShmTransport, SizesFromAllocatedMemoryOverMapping) {
  auto res = run_ranks(2, [](Rank& r) { return sizes_rank(r, true); });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// 3000 messages of varied size in flight at once on 4 tags; within a tag they
// must arrive in order (payload carries its sequence number).
TEST(ShmTransport, ManyInFlightKeepPerTagOrder) {
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

// Sends on tags 1,2,3 (small and large); receives posted 3,2,1 after the
// messages arrived: each receive gets its own tag's payload.
TEST(ShmTransport, TagMatchingOutOfOrder) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "tags");
    RANK_OK(link);
    Device& dev = *link->dev;
    std::vector<uint8_t> buf(3 * 100000);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    const size_t len[] = {10, 100000, 5000};
    std::vector<Completion> done;
    if (r.rank == 0) {
      std::vector<SendRequest> reqs;
      for (int t = 1; t <= 3; ++t) {
        fill(buf.data() + (t - 1) * 100000, len[t - 1], t);
        reqs.push_back({*mr, static_cast<uint64_t>(t - 1) * 100000, len[t - 1], static_cast<uint64_t>(t), 0});
      }
      RANK_CHECK(link->to(1).post_send(reqs).count == 3);
      RANK_OK(r.bootstrap->barrier("tags-sent"));
      RANK_CHECK(drain(dev, 3, &done));
    } else {
      RANK_OK(r.bootstrap->barrier("tags-sent"));
      // Let them arrive as unexpected messages first.
      Completion cs[4];
      for (int i = 0; i < 1000; ++i) RANK_CHECK(dev.poll(cs) == 0);
      for (int t = 3; t >= 1; --t) {
        RecvRequest rr{*mr, static_cast<uint64_t>(t - 1) * 100000, 100000, static_cast<uint64_t>(t),
                       static_cast<uint64_t>(t)};
        RANK_CHECK(link->to(0).post_recv({&rr, 1}).count == 1);
      }
      RANK_CHECK(drain(dev, 3, &done));
      std::vector<uint8_t> want(100000);
      for (auto& c : done) {
        int t = static_cast<int>(c.context);
        RANK_CHECK(c.tag == c.context && c.bytes == len[t - 1]);
        fill(want.data(), len[t - 1], t);
        RANK_CHECK(std::memcmp(buf.data() + (t - 1) * 100000, want.data(), len[t - 1]) == 0);
      }
    }
    RANK_OK(r.bootstrap->barrier("tags-done"));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Rank 1 advertises an allocated and a malloc'd region; rank 0 writes into
// both with immediates; rank 1 sees kRemoteWrite completions and the bytes.
TEST(ShmTransport, WriteWithImmediate) {
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
TEST(ShmTransport, OneSidedRead) {
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

// Endpoint::map: each rank maps the other's allocated region and the two
// trade values through it with plain stores and loads (a flag stored with
// release after the data publishes it), in both directions, many times.
// A registered heap region (no memfd) and another process's region are refused.
TEST(ShmTransport, MapGivesLoadStoreAccessToAllocatedMemory) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "map");
    RANK_OK(link);
    Device& dev = *link->dev;
    RANK_CHECK(dev.capabilities().load_store);
    auto shared = dev.allocate(4096);
    RANK_OK(shared);
    std::vector<uint8_t> heap(4096);
    auto hreg = dev.register_memory(heap.data(), heap.size());
    RANK_OK(hreg);
    std::memset((*shared)->addr(), 0, 4096);
    RemoteRegion mine[2] = {(*shared)->remote(), (*hreg)->remote()};
    auto all = r.bootstrap->all_gather("map/regions", std::string(reinterpret_cast<char*>(mine), sizeof(mine)));
    RANK_OK(all);
    RemoteRegion theirs[2];
    std::memcpy(theirs, (*all)[static_cast<size_t>(1 - r.rank)].data(), sizeof(theirs));
    Endpoint& ep = link->to(1 - r.rank);
    auto heap_map = ep.map(theirs[1]);
    RANK_CHECK(!heap_map && heap_map.error().code() == Errc::kInvalidArgument);
    auto own = ep.map(mine[0]);  // ours, not the peer's
    RANK_CHECK(!own && own.error().code() == Errc::kInvalidArgument);
    auto m = ep.map(theirs[0]);
    RANK_OK(m);
    // Rank r writes its messages into the peer's region at [0, 2048) (data at
    // +64, flag at +0) and reads the peer's from its own region.
    auto* out = static_cast<uint8_t*>(*m);
    auto* in = static_cast<uint8_t*>((*shared)->addr());
    for (uint64_t round = 1; round <= 2000; ++round) {
      auto* ack = reinterpret_cast<uint64_t*>(in + 2048);  // the peer has read `round - 1`
      while (__atomic_load_n(ack, __ATOMIC_ACQUIRE) != round - 1) {
      }
      for (size_t i = 0; i < 1000; ++i) out[64 + i] = static_cast<uint8_t>(round * 7 + i + r.rank);
      __atomic_store_n(reinterpret_cast<uint64_t*>(out), round, __ATOMIC_RELEASE);
      while (__atomic_load_n(reinterpret_cast<uint64_t*>(in), __ATOMIC_ACQUIRE) != round) {
      }
      for (size_t i = 0; i < 1000; ++i)
        if (in[64 + i] != static_cast<uint8_t>(round * 7 + i + (1 - r.rank))) {
          std::fprintf(stderr, "rank %d round %llu byte %zu: %u\n", r.rank, static_cast<unsigned long long>(round),
                       i, in[64 + i]);
          return 1;
        }
      __atomic_store_n(reinterpret_cast<uint64_t*>(out + 2048), round, __ATOMIC_RELEASE);
    }
    RANK_OK(r.bootstrap->barrier("map-done"));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

TEST(ShmTransport, TruncationIsReported) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "trunc");
    RANK_OK(link);
    Device& dev = *link->dev;
    std::vector<uint8_t> buf(100000, 7);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    std::vector<Completion> done;
    if (r.rank == 0) {
      SendRequest s[2] = {{*mr, 0, 100, 5, 1}, {*mr, 0, 100000, 6, 2}};
      RANK_CHECK(link->to(1).post_send(s).count == 2);
    } else {
      RecvRequest q[2] = {{*mr, 0, 50, 5, 1}, {*mr, 0, 4096, 6, 2}};
      RANK_CHECK(link->to(0).post_recv(q).count == 2);
    }
    RANK_CHECK(drain(dev, 2, &done));
    for (auto& c : done)
      if (r.rank == 1) RANK_CHECK(c.status == Status::kTruncated && c.bytes == (c.context == 1 ? 50u : 4096u));
    RANK_OK(r.bootstrap->barrier("trunc-done"));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Rank 1 dies (SIGKILL) while rank 0 waits on a receive from it: the receive
// completes with kPeerGone within a second and later posts are refused.
TEST(ShmTransport, PeerDeathFailsPendingRequests) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "death");
    RANK_OK(link);
    if (r.rank == 1) ::raise(SIGKILL);
    Device& dev = *link->dev;
    std::vector<uint8_t> buf(1 << 20);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    RecvRequest q{*mr, 0, buf.size(), 9, 77};
    RANK_CHECK(link->to(1).post_recv({&q, 1}).count == 1);
    uint64_t t0 = now_ns();
    std::vector<Completion> done;
    RANK_CHECK(drain(dev, 1, &done));
    RANK_CHECK(done[0].context == 77 && done[0].status == Status::kPeerGone && done[0].peer == 1);
    RANK_CHECK(now_ns() - t0 < 1'000'000'000ull);
    RANK_CHECK(link->to(1).peer_failed());
    SendRequest s{*mr, 0, 10, 1, 1};
    PostResult pr = link->to(1).post_send({&s, 1});
    RANK_CHECK(pr.count == 0 && pr.error == Errc::kPeerFailed);
    return 0;
  });
  ASSERT_EQ(res.codes.size(), 2u);
  EXPECT_EQ(res.codes[0], 0);
  EXPECT_EQ(res.codes[1], 128 + SIGKILL);
}

TEST(ShmTransport, UnknownAndUnbuiltDriversNameTheAlternatives) {
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

TEST(ShmTransport, RegistrationCacheReusesCoveringRegion) {
  DeviceOptions o;
  o.job_id = "cache-" + std::to_string(::getpid());
  auto d = Device::open(o);
  ASSERT_TRUE(d.ok()) << d.error().message();
  Device& dev = **d;
  std::vector<uint8_t> buf(1 << 16);
  auto a = dev.register_memory(buf.data(), buf.size());
  ASSERT_TRUE(a.ok());
  auto b = dev.register_memory(buf.data() + 100, 1000);  // inside a
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(dev.registration_count(), 1u);
  EXPECT_TRUE(dev.deregister_memory(*b).ok());
  EXPECT_EQ(dev.registration_count(), 1u);  // a still holds it
  EXPECT_TRUE(dev.deregister_memory(*a).ok());
  EXPECT_EQ(dev.registration_count(), 0u);
  EXPECT_EQ(dev.deregister_memory(*a).error().code(), Errc::kNotFound);
  auto big = dev.allocate(1 << 20);
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE(dev.capabilities().allocate_shared);
  EXPECT_TRUE(dev.free(*big).ok());
  EXPECT_EQ(dev.registration_count(), 0u);
}

uint64_t counter(const Device& dev, const char* name) {
  for (auto& [n, v] : dev.counters())
    if (n == name) return v;
  return ~uint64_t{0};
}

// A caller that posts again and again without polling: one-sided writes
// without immediate complete at once, so before the completion queue had
// back-pressure the 33rd completion (queue of 32: 8 slots, depth 8) was
// dropped with a log line and its request never completed. Now the queue
// stops taking work when it is full (a post is refused: poll, then post the
// rest) and every request completes exactly once.
TEST(ShmTransport, CompletionQueueNeverDropsWhenTheCallerDoesNotPoll) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    DeviceOptions o;
    o.queue_depth = 8;
    o.params["slots"] = "8";
    auto link = open_link(r, "cqfull", o);
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kWrites = 6 * 8, kLen = 64;
    auto shared = dev.allocate(kWrites * kLen);
    RANK_OK(shared);
    RemoteRegion mine = (*shared)->remote();
    auto all = r.bootstrap->all_gather("cqfull/region", std::string(reinterpret_cast<char*>(&mine), sizeof(mine)));
    RANK_OK(all);
    if (r.rank == 0) {
      RemoteRegion theirs;
      std::memcpy(&theirs, (*all)[1].data(), sizeof(theirs));
      auto* src = static_cast<uint8_t*>((*shared)->addr());
      fill(src, kWrites * kLen, 5);
      std::vector<WriteRequest> w;
      for (size_t i = 0; i < kWrites; ++i) w.push_back({*shared, i * kLen, kLen, theirs, i * kLen, 0, false, i + 1});
      // Six posts of eight, no poll in between: more than the queue holds.
      size_t posted = 0;
      bool refused = false;
      for (size_t b = 0; b < kWrites / 8; ++b) {
        PostResult pr = link->to(1).post_write(std::span<const WriteRequest>(w).subspan(posted, 8));
        RANK_CHECK(pr.error == Errc::kOk);
        posted += pr.count;
        if (pr.count < 8) {
          refused = true;
          break;
        }
      }
      RANK_CHECK(refused);  // back-pressure, not a silent drop
      std::vector<Completion> done;
      while (posted < kWrites) {  // poll, then post the rest
        Completion cs[8];
        size_t n = dev.poll(cs);
        done.insert(done.end(), cs, cs + n);
        posted += link->to(1).post_write(std::span<const WriteRequest>(w).subspan(posted)).count;
      }
      RANK_CHECK(drain(dev, kWrites, &done));
      std::vector<int> seen(kWrites + 1, 0);
      for (auto& c : done) {
        RANK_CHECK(c.op == Op::kWrite && c.status == Status::kSuccess && c.bytes == kLen);
        RANK_CHECK(c.context >= 1 && c.context <= kWrites);
        ++seen[c.context];
      }
      for (size_t i = 1; i <= kWrites; ++i) RANK_CHECK(seen[i] == 1);
      Completion extra[4];
      RANK_CHECK(dev.poll(extra) == 0);
      RANK_CHECK(counter(dev, "cq_overflows") == 0);
    }
    RANK_OK(r.bootstrap->barrier("cqfull-written"));
    if (r.rank == 1) {
      std::vector<uint8_t> want(kWrites * kLen);
      fill(want.data(), want.size(), 5);
      RANK_CHECK(std::memcmp((*shared)->addr(), want.data(), want.size()) == 0);
    }
    RANK_OK(r.bootstrap->barrier("cqfull-done"));
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
}  // namespace grex::test
