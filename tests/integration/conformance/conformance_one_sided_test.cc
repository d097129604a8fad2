// SPDX-License-Identifier: Apache-2.0
// The transport contract, one-sided part (see conformance_test.cc): writes with
// immediate, reads and load/store mapping where offered, and requests out of
// a region's bounds.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "conformance_checks.h"

namespace grex::test {
namespace {

// ---------------------------------------------------------------- one-sided

// Rank 0 writes 3 MiB + 17 B into the second half of rank 1's region with
// immediate 42: rank 0 sees kWrite/kSuccess, rank 1 one kRemoteWrite with
// the immediate, the length and the peer, and exactly those bytes changed.
// Then 200 small writes with immediates into distinct ranges: each arrives
// once, its bytes in place when its completion is polled; then a write
// without immediate, of which the target hears nothing.
TEST_F(Conformance, WriteWithImmediate) {
  auto res = driver.run([&](Rank& r) -> int {
    auto link = open(r, "cwimm");
    RANK_OK(link);
    Device& dev = *link->dev;
    if (!dev.capabilities().write_imm) return 77;
    constexpr size_t kLen = (3u << 20) + 17, kSmall = 200;
    auto small_size = [](size_t i) -> size_t { return (i * 131) % 5000 + 1; };
    std::vector<size_t> small_off(kSmall + 1, 2 * kLen);
    for (size_t i = 0; i < kSmall; ++i) small_off[i + 1] = small_off[i] + small_size(i);
    const size_t quiet_off = small_off[kSmall], total = quiet_off + 4096;
    std::vector<uint8_t> buf(total, 0);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    auto regions = exchange_regions(r, "cwimm/region", *mr);
    RANK_OK(regions);
    std::vector<Completion> done;
    if (r.rank == 0) {
      const RemoteRegion theirs = (*regions)[1];
      RANK_CHECK(theirs.length == total);
      fill(buf.data(), kLen, 42);
      RANK_CHECK(write_all(dev, link->to(1), {{*mr, 0, kLen, theirs, kLen, 42, true, 1}}, &done));
      RANK_CHECK(drain(dev, 1, &done, 60'000));
      RANK_CHECK(done[0].op == Op::kWrite && done[0].status == Status::kSuccess && done[0].context == 1);
      std::vector<WriteRequest> w;
      for (size_t i = 0; i < kSmall; ++i) {
        fill(buf.data() + small_off[i], small_size(i), i);
        w.push_back({*mr, small_off[i], small_size(i), theirs, small_off[i], static_cast<uint32_t>(1000 + i), true,
                     100 + i});
      }
      fill(buf.data() + quiet_off, 4096, 77);
      w.push_back({*mr, quiet_off, 4096, theirs, quiet_off, 7, false, 999});
      done.clear();
      RANK_CHECK(write_all(dev, link->to(1), w, &done));
      RANK_CHECK(drain(dev, w.size(), &done, 60'000));
      for (auto& c : done) RANK_CHECK(c.op == Op::kWrite && c.status == Status::kSuccess);
      signal(r, "cwimm/written");
    } else {
      // The big write first (rank 0 posts the small ones after it completed),
      // then the small ones in any order; each one's bytes are in place when
      // its completion is polled.
      bool big = false;
      std::vector<bool> seen(kSmall, false);
      Completion cs[16];
      Deadline dl = Deadline::after_ms(60'000);
      for (size_t got = 0; got < kSmall + 1 && !dl.expired();) {
        const size_t n = dev.poll(cs);
        for (size_t k = 0; k < n; ++k, ++got) {
          const Completion& c = cs[k];
          RANK_CHECK(c.op == Op::kRemoteWrite && c.status == Status::kSuccess && c.peer == 0);
          if (!big) {
            print_completion("target", c);
            RANK_CHECK(c.imm == 42 && c.bytes == kLen);
            RANK_CHECK(checksum(buf.data() + kLen, kLen) == fill_checksum(kLen, 42));
            for (size_t i = 0; i < kLen; ++i) RANK_CHECK(buf[i] == 0);  // the first half untouched
            big = true;
            continue;
          }
          RANK_CHECK(c.imm >= 1000);
          const size_t i = c.imm - 1000;
          RANK_CHECK(i < kSmall && !seen[i] && c.bytes == small_size(i));
          seen[i] = true;
          RANK_CHECK(checksum(buf.data() + small_off[i], small_size(i)) == fill_checksum(small_size(i), i));
        }
      }
      RANK_CHECK(big);
      for (size_t i = 0; i < kSmall; ++i) RANK_CHECK(seen[i]);
      std::vector<Completion> quiet;
      RANK_CHECK(serve_until(r, dev, "cwimm/written", &quiet));
      RANK_CHECK(quiet.empty());  // a write without immediate raises nothing at the target
      RANK_CHECK(checksum(buf.data() + quiet_off, 4096) == fill_checksum(4096, 77));
    }
    RANK_CHECK(finish(r, dev, "cwimm/done"));
    return 0;
  });
  if (res.codes.size() == 2 && res.codes[0] == 77 && res.codes[1] == 77)
    GTEST_SKIP() << driver.name() << " has no write with immediate (Capabilities::write_imm is false)";
  EXPECT_RANKS_OK(res);
}

// One-sided reads of a peer's registered region: the bytes arrive, the peer
// is told nothing, a read past the end fails with kRemoteAccess and the
// connection stays usable.
TEST_F(Conformance, OneSidedRead) {
  auto res = driver.run([&](Rank& r) -> int {
    auto link = open(r, "cread");
    RANK_OK(link);
    Device& dev = *link->dev;
    if (!dev.capabilities().read) return 77;
    constexpr size_t kLen = (1u << 20) + 17;
    std::vector<uint8_t> src(2 * kLen), dst(2 * kLen + 64, 0);
    fill(src.data(), src.size(), 60 + static_cast<uint64_t>(r.rank));
    auto smr = dev.register_memory(src.data(), src.size());
    RANK_OK(smr);
    auto dmr = dev.register_memory(dst.data(), dst.size());
    RANK_OK(dmr);
    auto regions = exchange_regions(r, "cread/region", *smr);
    RANK_OK(regions);
    if (r.rank == 0) {
      const RemoteRegion theirs = (*regions)[1];
      ReadRequest rd[3] = {{*dmr, 0, kLen, theirs, 5, 1},
                           {*dmr, kLen, kLen, theirs, 7, 2},
                           {*dmr, 0, 16, theirs, 2 * kLen - 8, 3}};  // past the end
      std::vector<Completion> done;
      RANK_CHECK(post_all(dev, std::vector<ReadRequest>(rd, rd + 3), [&](auto s) { return link->to(1).post_read(s); },
                          &done));
      RANK_CHECK(drain(dev, 3, &done));
      for (auto& c : done) {
        RANK_CHECK(c.op == Op::kRead && c.peer == 1);
        RANK_CHECK((c.context == 3) == (c.status == Status::kRemoteAccess));
        if (c.context < 3) RANK_CHECK(c.status == Status::kSuccess && c.bytes == kLen);
      }
      std::vector<uint8_t> want(2 * kLen);
      fill(want.data(), want.size(), 61);
      RANK_CHECK(std::memcmp(dst.data(), want.data() + 5, kLen) == 0);
      RANK_CHECK(std::memcmp(dst.data() + kLen, want.data() + 7, kLen) == 0);
      RANK_CHECK(!link->to(1).peer_failed());
      signal(r, "cread/read");
    } else {
      std::vector<Completion> seen;
      RANK_CHECK(serve_until(r, dev, "cread/read", &seen));
      RANK_CHECK(seen.empty());  // reads raise nothing on the target
    }
    RANK_CHECK(finish(r, dev, "cread/done"));
    return 0;
  });
  if (res.codes.size() == 2 && res.codes[0] == 77 && res.codes[1] == 77)
    GTEST_SKIP() << driver.name() << " has no one-sided read (Capabilities::read is false)";
  EXPECT_RANKS_OK(res);
}

// Endpoint::map: each rank maps the other's allocate()d region and the two
// trade values through it with plain stores and loads (a flag stored with
// release after the data publishes it), both ways, many times. A registered
// region that allocate() did not make, and the rank's own region, are refused.
TEST_F(Conformance, MapGivesLoadStoreAccessToAllocatedMemory) {
  auto res = driver.run([&](Rank& r) -> int {
    auto link = open(r, "cmap");
    RANK_OK(link);
    Device& dev = *link->dev;
    if (!dev.capabilities().load_store) return 77;
    auto shared = dev.allocate(4096);
    RANK_OK(shared);
    std::memset((*shared)->addr(), 0, 4096);
    std::vector<uint8_t> heap(4096);
    auto hreg = dev.register_memory(heap.data(), heap.size());
    RANK_OK(hreg);
    auto shared_all = exchange_regions(r, "cmap/shared", *shared);
    auto heap_all = exchange_regions(r, "cmap/heap", *hreg);
    RANK_OK(shared_all);
    RANK_OK(heap_all);
    const int peer = 1 - r.rank;
    Endpoint& ep = link->to(peer);
    auto heap_map = ep.map((*heap_all)[static_cast<size_t>(peer)]);
    RANK_CHECK(!heap_map && heap_map.error().code() == Errc::kInvalidArgument);
    auto own = ep.map((*shared)->remote());  // ours, not the peer's
    RANK_CHECK(!own && own.error().code() == Errc::kInvalidArgument);
    auto m = ep.map((*shared_all)[static_cast<size_t>(peer)]);
    RANK_OK(m);
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
      for (size_t i = 0; i < 1000; ++i) RANK_CHECK(in[64 + i] == static_cast<uint8_t>(round * 7 + i + peer));
      __atomic_store_n(reinterpret_cast<uint64_t*>(out + 2048), round, __ATOMIC_RELEASE);
    }
    RANK_CHECK(finish(r, dev, "cmap/done"));
    return 0;
  });
  if (res.codes.size() == 2 && res.codes[0] == 77 && res.codes[1] == 77)
    GTEST_SKIP() << driver.name() << " gives no load/store access to peers (Capabilities::load_store is false)";
  EXPECT_RANKS_OK(res);
}

// ---------------------------------------------------------------- bounds

// Requests outside their regions fail alone, with a status, and leave the
// connection usable: a local range past the end (or no region) is
// kLocalError for sends, receives and writes; a remote range past the end of
// what the peer advertised is kRemoteAccess. A receive that fails this way
// takes no message: the next receive on its tag gets it.
TEST_F(Conformance, OutOfBoundsRequestsAreRefused) {
  auto res = driver.run([&](Rank& r) -> int {
    auto link = open(r, "cbounds");
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kLen = 1 << 16;
    std::vector<uint8_t> buf(kLen, 0);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    auto regions = exchange_regions(r, "cbounds/region", *mr);
    RANK_OK(regions);
    std::vector<Completion> done;
    auto status_of = [&](uint64_t ctx) {
      for (auto& c : done)
        if (c.context == ctx) return c.status;
      return Status::kCancelled;
    };
    if (r.rank == 0) {
      const RemoteRegion theirs = (*regions)[1];
      RANK_CHECK(send_all(dev, link->to(1), {{*mr, kLen - 8, 16, 3, 1}, {nullptr, 0, 16, 3, 2}}, &done));
      RANK_CHECK(drain(dev, 2, &done));
      RANK_CHECK(status_of(1) == Status::kLocalError && status_of(2) == Status::kLocalError);
      if (dev.capabilities().write_imm) {
        done.clear();
        RANK_CHECK(write_all(dev, link->to(1),
                             {{*mr, kLen - 8, 16, theirs, 0, 1, true, 3}, {*mr, 0, 16, theirs, kLen - 8, 2, true, 4}},
                             &done));
        RANK_CHECK(drain(dev, 2, &done));
        RANK_CHECK(status_of(3) == Status::kLocalError && status_of(4) == Status::kRemoteAccess);
      }
      if (dev.capabilities().read) {
        done.clear();
        ReadRequest rd[2] = {{*mr, kLen - 8, 16, theirs, 0, 5}, {*mr, 0, 16, theirs, kLen - 8, 6}};
        RANK_CHECK(post_all(dev, std::vector<ReadRequest>(rd, rd + 2), [&](auto s) { return link->to(1).post_read(s); },
                            &done));
        RANK_CHECK(drain(dev, 2, &done));
        RANK_CHECK(status_of(5) == Status::kLocalError && status_of(6) == Status::kRemoteAccess);
      }
      // The connection still works: a message on tag 3, and a write that lands.
      fill(buf.data(), 1000, 3);
      done.clear();
      RANK_CHECK(send_all(dev, link->to(1), {{*mr, 0, 1000, 3, 7}}, &done));
      RANK_CHECK(drain(dev, 1, &done));
      RANK_CHECK(status_of(7) == Status::kSuccess);
      if (dev.capabilities().write_imm) {
        done.clear();
        RANK_CHECK(write_all(dev, link->to(1), {{*mr, 0, 1000, theirs, 5000, 9, true, 8}}, &done));
        RANK_CHECK(drain(dev, 1, &done));
        RANK_CHECK(status_of(8) == Status::kSuccess);
      }
      RANK_CHECK(!link->to(1).peer_failed());
    } else {
      RANK_CHECK(recv_all(dev, link->to(0), {{*mr, kLen - 8, 16, 3, 1}, {nullptr, 0, 16, 3, 2}}, &done));
      RANK_CHECK(drain(dev, 2, &done));  // before any message: they fail at once
      RANK_CHECK(status_of(1) == Status::kLocalError && status_of(2) == Status::kLocalError);
      RANK_CHECK(recv_all(dev, link->to(0), {{*mr, 0, kLen, 3, 3}}, &done));
      // The message and the write may have come with the first two.
      const size_t want = dev.capabilities().write_imm ? 4 : 3;
      const bool drained = drain(dev, want, &done);
      for (auto& c : done) print_completion("bounds receiver", c);
      RANK_CHECK(drained && done.size() == want);
      for (auto& c : done) {
        if (c.op == Op::kRecv && c.context == 3) RANK_CHECK(c.status == Status::kSuccess && c.bytes == 1000);
        if (c.op == Op::kRemoteWrite) RANK_CHECK(c.imm == 9 && c.status == Status::kSuccess && c.bytes == 1000);
      }
      RANK_CHECK(status_of(3) == Status::kSuccess);
      RANK_CHECK(checksum(buf.data(), 1000) == fill_checksum(1000, 3));
      if (want == 4) RANK_CHECK(checksum(buf.data() + 5000, 1000) == fill_checksum(1000, 3));
      RANK_CHECK(!link->to(0).peer_failed());
    }
    RANK_CHECK(finish(r, dev, "cbounds/done"));
    return 0;
  });
  EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace grex::test
