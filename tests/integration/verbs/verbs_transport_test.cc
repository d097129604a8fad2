// SPDX-License-Identifier: Apache-2.0
// The verbs driver between two real processes, through the transport contract
// only: sizes 0 B .. 64 MiB, 500 messages in flight on 4 tags (FIFO per tag),
// truncation, write-with-immediate (then an out-of-range write, last: on RC it
// leaves the queue pair in the error state), a peer killed mid-transfer,
// capabilities and counters, the NIC's per-QP rate limit only where offered,
// a CUDA registration on a host without CUDA.
// Payloads are checked by checksum. Runs on any RDMA device; in CI under
// tests/scripts/softroce.sh (Soft-RoCE in a qemu VM under TCG, ~100 MB/s, so
// the volumes stay small). Skips, saying why, without rdma-core or a device.
#include <gtest/gtest.h>

#include <signal.h>

#include <cstring>
#include <vector>

#include "verbs_env.h"

#ifdef GREX_HAVE_VERBS
#include <infiniband/verbs.h>
#endif

namespace grex::test {
namespace {

// Rank 0 sends message i (sizes[i] bytes, tag i % 4) from one registered
// buffer; rank 1 receives into its own and compares checksums.
int exchange(Rank& r, const char* name, const std::vector<size_t>& sizes, int64_t timeout_ms,
             const std::map<std::string, std::string>& extra = {}) {
  auto link = open_link(r, name, verbs_options(extra));
  RANK_OK(link);
  Device& dev = *link->dev;
  size_t total = 0;
  for (size_t s : sizes) total += s;
  std::vector<uint8_t> buf(total + 1, 0xee);
  auto mr = dev.register_memory(buf.data(), buf.size());
  RANK_OK(mr);
  std::vector<Completion> done;
  if (r.rank == 0) {
    std::vector<SendRequest> reqs;
    for (size_t i = 0, off = 0; i < sizes.size(); off += sizes[i], ++i) {
      fill(buf.data() + off, sizes[i], i);
      RANK_CHECK(checksum(buf.data() + off, sizes[i]) == fill_checksum(sizes[i], i));
      reqs.push_back({*mr, off, sizes[i], i % 4, i});
    }
    RANK_CHECK(post_all(dev, reqs, [&](auto s) { return link->to(1).post_send(s); }, &done));
    RANK_CHECK(drain(dev, reqs.size(), &done, timeout_ms));
    for (auto& c : done) {
      if (c.status != Status::kSuccess || c.op != Op::kSend || c.peer != 1) print_completion("sender", c);
      RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kSend && c.peer == 1);
    }
  } else {
    std::vector<RecvRequest> reqs;
    for (size_t i = 0, off = 0; i < sizes.size(); off += sizes[i], ++i) reqs.push_back({*mr, off, sizes[i], i % 4, i});
    RANK_CHECK(post_all(dev, reqs, [&](auto q) { return link->to(0).post_recv(q); }, &done));
    RANK_CHECK(drain(dev, reqs.size(), &done, timeout_ms));
    for (auto& c : done) {
      size_t i = c.context;
      if (c.status != Status::kSuccess || c.op != Op::kRecv || i >= sizes.size() || c.bytes != sizes[i])
        print_completion("receiver", c);
      RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kRecv && c.peer == 0);
      RANK_CHECK(i < sizes.size() && c.bytes == sizes[i] && c.tag == i % 4);
      RANK_CHECK(checksum(buf.data() + reqs[i].offset, sizes[i]) == fill_checksum(sizes[i], i));
    }
    RANK_CHECK(buf[total] == 0xee);  // nothing past the last message
  }
  RANK_OK(r.bootstrap->barrier(std::string(name) + "/done"));
  RANK_OK(dev.deregister_memory(*mr));
  return 0;
}

// One message of each size (81 MiB in all): inline-sized, around the 4 KiB
// MTU, and large ones that need many packets (and any rendezvous path).
TEST(VerbsTransport, SizesUpTo64MiB) {
  REQUIRE_VERBS();
  auto res = run_ranks(2, [](Rank& r) {
    return exchange(r, "vsz", {0, 1, 7, 4095, 4097, 65536, (1u << 20) + 3, 16u << 20, 64u << 20}, 180'000);
  }, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// The same exchange with one shared receive queue for all peers and no
// inline data (control messages then go from registered send slots).
TEST(VerbsTransport, SharedReceiveQueueWithoutInline) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "verbs options";
  auto res = run_ranks(2, [](Rank& r) {
    std::vector<size_t> sizes = {0, 1, 7, 4097, (1u << 20) + 3};
    for (size_t i = 0; i < 300; ++i) sizes.push_back((i * 7919) % 20'000);
    return exchange(r, "vsrq", sizes, 120'000, {{"srq", "1"}, {"inline", "0"}});
  }, 180);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// 500 messages of mixed size (8 B .. 30 KB, every 50th 200 KB; ~9.5 MB) in
// flight at once on 4 tags, into receive buffers 64 bytes larger than the
// message. Within a tag they must arrive in posting order: each payload
// starts with its sequence number on its tag.
TEST(VerbsTransport, ManyInFlightKeepPerTagOrder) {
  REQUIRE_VERBS();
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "vmany", verbs_options());
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kMsgs = 500, kSlack = 64;
    auto size_of = [](size_t i) -> size_t { return i % 50 == 7 ? 200'000 + i : 8 + (i * 7919) % 30'000; };
    std::vector<size_t> off(kMsgs + 1, 0);
    for (size_t i = 0; i < kMsgs; ++i) off[i + 1] = off[i] + size_of(i) + kSlack;
    std::vector<uint8_t> buf(off[kMsgs], 0xee);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    std::vector<Completion> done;
    if (r.rank == 0) {
      std::vector<SendRequest> reqs;
      for (size_t i = 0; i < kMsgs; ++i) {
        uint64_t seq = i / 4;
        std::memcpy(buf.data() + off[i], &seq, 8);
        fill(buf.data() + off[i] + 8, size_of(i) - 8, i);
        reqs.push_back({*mr, off[i], size_of(i), i % 4, i});
      }
      RANK_CHECK(post_all(dev, reqs, [&](auto s) { return link->to(1).post_send(s); }, &done));
      RANK_CHECK(drain(dev, kMsgs, &done, 120'000));
      for (auto& c : done) {
        if (c.status != Status::kSuccess) print_completion("sender", c);
        RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kSend);
      }
    } else {
      std::vector<RecvRequest> reqs;
      for (size_t i = 0; i < kMsgs; ++i) reqs.push_back({*mr, off[i], size_of(i) + kSlack, i % 4, i});
      RANK_CHECK(post_all(dev, reqs, [&](auto q) { return link->to(0).post_recv(q); }, &done));
      RANK_CHECK(drain(dev, kMsgs, &done, 120'000));
      std::vector<bool> seen(kMsgs, false);
      for (auto& c : done) {
        size_t i = c.context;
        if (c.status != Status::kSuccess || i >= kMsgs || c.bytes != size_of(i)) print_completion("receiver", c);
        RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kRecv);
        RANK_CHECK(i < kMsgs && !seen[i]);
        seen[i] = true;
        RANK_CHECK(c.bytes == size_of(i) && c.tag == i % 4);
        uint64_t seq;
        std::memcpy(&seq, buf.data() + off[i], 8);
        if (seq != i / 4) std::fprintf(stderr, "receive %zu (tag %zu) got message %llu of its tag\n", i, i % 4,
                                       static_cast<unsigned long long>(seq));
        RANK_CHECK(seq == i / 4);  // the i-th receive on tag i%4 got the i/4-th send on that tag
        RANK_CHECK(checksum(buf.data() + off[i] + 8, size_of(i) - 8) == fill_checksum(size_of(i) - 8, i));
        RANK_CHECK(buf[off[i] + size_of(i)] == 0xee);  // the slack stays untouched
      }
    }
    RANK_OK(r.bootstrap->barrier("vmany/done"));
    return 0;
  }, 180);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// A 100 B message into a 50 B buffer and a 100 kB one into 4096 B: the
// receiver sees kTruncated with bytes = its buffer size, the sender kSuccess;
// the connection stays usable (a 1 MB message after them arrives intact).
TEST(VerbsTransport, TruncationIsReportedAndConnectionSurvives) {
  REQUIRE_VERBS();
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "vtrunc", verbs_options());
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kAfter = 1'000'003;
    std::vector<uint8_t> buf(200'000 + kAfter, 7);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    std::vector<Completion> done;
    if (r.rank == 0) {
      fill(buf.data(), 100'000, 5);
      fill(buf.data() + 200'000, kAfter, 99);
      std::vector<SendRequest> s = {{*mr, 0, 100, 5, 1}, {*mr, 0, 100'000, 6, 2}, {*mr, 200'000, kAfter, 7, 3}};
      RANK_CHECK(post_all(dev, s, [&](auto x) { return link->to(1).post_send(x); }, &done));
      RANK_CHECK(drain(dev, 3, &done, 60'000));
      for (auto& c : done) {
        if (c.status != Status::kSuccess) print_completion("sender", c);
        RANK_CHECK(c.op == Op::kSend && c.status == Status::kSuccess);
      }
    } else {
      std::vector<RecvRequest> q = {{*mr, 0, 50, 5, 1}, {*mr, 100, 4096, 6, 2}, {*mr, 200'000, kAfter, 7, 3}};
      RANK_CHECK(post_all(dev, q, [&](auto x) { return link->to(0).post_recv(x); }, &done));
      RANK_CHECK(drain(dev, 3, &done, 60'000));
      for (auto& c : done) {
        print_completion("receiver", c);
        RANK_CHECK(c.op == Op::kRecv && c.peer == 0);
        if (c.context == 1) RANK_CHECK(c.status == Status::kTruncated && c.bytes == 50 && c.tag == 5);
        if (c.context == 2) RANK_CHECK(c.status == Status::kTruncated && c.bytes == 4096 && c.tag == 6);
        if (c.context == 3) RANK_CHECK(c.status == Status::kSuccess && c.bytes == kAfter && c.tag == 7);
      }
      RANK_CHECK(checksum(buf.data() + 200'000, kAfter) == fill_checksum(kAfter, 99));
      for (size_t i = 50; i < 100; ++i) RANK_CHECK(buf[i] == 7);  // nothing written past either buffer
      for (size_t i = 100 + 4096; i < 200'000; ++i) RANK_CHECK(buf[i] == 7);
    }
    RANK_OK(r.bootstrap->barrier("vtrunc/done"));
    return 0;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Rank 0 writes 3 MiB + 17 B into the second half of rank 1's region with
// immediate 42: rank 0 sees kWrite/kSuccess, rank 1 a kRemoteWrite with imm
// and bytes, and exactly those bytes changed. Then, last (an RC queue pair is
// in the error state after it), a write 8 bytes past the end of the region:
// kRemoteAccess on rank 0; nothing else is checked after it.
TEST(VerbsTransport, WriteWithImmediateThenOutOfRangeWrite) {
  REQUIRE_VERBS();
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "vwimm", verbs_options());
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kLen = (3u << 20) + 17;
    std::vector<uint8_t> buf(2 * kLen, 0);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    RemoteRegion mine = (*mr)->remote();
    auto all = r.bootstrap->all_gather("vwimm/region", std::string(reinterpret_cast<char*>(&mine), sizeof(mine)));
    RANK_OK(all);
    std::vector<Completion> done;
    if (r.rank == 0) {
      RemoteRegion theirs;
      std::memcpy(&theirs, (*all)[1].data(), sizeof(theirs));
      RANK_CHECK(theirs.length == 2 * kLen);
      fill(buf.data(), kLen, 42);
      std::vector<WriteRequest> w = {{*mr, 0, kLen, theirs, kLen, 42, true, 1}};
      RANK_CHECK(post_all(dev, w, [&](auto x) { return link->to(1).post_write(x); }, &done));
      RANK_CHECK(drain(dev, 1, &done, 60'000));
      print_completion("writer", done[0]);
      RANK_CHECK(done[0].op == Op::kWrite && done[0].status == Status::kSuccess && done[0].context == 1);
      RANK_OK(r.bootstrap->barrier("vwimm/landed"));
      // Last: 16 bytes at 2*kLen-8 end 8 bytes past the region.
      done.clear();
      std::vector<WriteRequest> bad = {{*mr, 0, 16, theirs, 2 * kLen - 8, 43, true, 2}};
      RANK_CHECK(post_all(dev, bad, [&](auto x) { return link->to(1).post_write(x); }, &done));
      RANK_CHECK(drain(dev, 1, &done, 30'000));
      print_completion("out-of-range writer", done[0]);
      RANK_CHECK(done[0].op == Op::kWrite && done[0].context == 2 && done[0].status == Status::kRemoteAccess);
    } else {
      RANK_CHECK(drain(dev, 1, &done, 60'000));
      print_completion("target", done[0]);
      RANK_CHECK(done[0].op == Op::kRemoteWrite && done[0].status == Status::kSuccess);
      RANK_CHECK(done[0].imm == 42 && done[0].bytes == kLen && done[0].peer == 0);
      std::vector<uint8_t> want(kLen);
      fill(want.data(), kLen, 42);
      RANK_CHECK(std::memcmp(buf.data() + kLen, want.data(), kLen) == 0);
      for (size_t i = 0; i < kLen; ++i) RANK_CHECK(buf[i] == 0);  // the first half untouched
      RANK_OK(r.bootstrap->barrier("vwimm/landed"));
      // Rank 0's bad write may move this side's queue pair to the error state
      // too: no more traffic here, only the bootstrap barrier.
    }
    RANK_OK(r.bootstrap->barrier("vwimm/done"));
    return 0;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// 200 writes with immediates into distinct ranges: the target's kRemoteWrite
// completions come in posting order, and when each arrives its bytes are
// already in place.
TEST(VerbsTransport, WritesWithImmediateCompleteInOrder) {
  REQUIRE_VERBS();
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "vword", verbs_options());
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kWrites = 200;
    auto size_of = [](size_t i) -> size_t { return (i * 131) % 5000 + 1; };
    std::vector<size_t> off(kWrites + 1, 0);
    for (size_t i = 0; i < kWrites; ++i) off[i + 1] = off[i] + size_of(i);
    std::vector<uint8_t> buf(off[kWrites], 0);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    RemoteRegion mine = (*mr)->remote();
    auto all = r.bootstrap->all_gather("vword/region", std::string(reinterpret_cast<char*>(&mine), sizeof(mine)));
    RANK_OK(all);
    std::vector<Completion> done;
    if (r.rank == 0) {
      RemoteRegion theirs;
      std::memcpy(&theirs, (*all)[1].data(), sizeof(theirs));
      std::vector<WriteRequest> w;
      for (size_t i = 0; i < kWrites; ++i) {
        fill(buf.data() + off[i], size_of(i), i);
        w.push_back({*mr, off[i], size_of(i), theirs, off[i], static_cast<uint32_t>(1000 + i), true, i});
      }
      RANK_CHECK(post_all(dev, w, [&](auto x) { return link->to(1).post_write(x); }, &done));
      RANK_CHECK(drain(dev, kWrites, &done, 60'000));
      for (auto& c : done) RANK_CHECK(c.op == Op::kWrite && c.status == Status::kSuccess);
    } else {
      Completion cs[16];
      size_t next = 0;
      uint64_t deadline = now_ns() + 60'000'000'000ull;
      while (next < kWrites && now_ns() < deadline) {
        size_t n = dev.poll(cs);
        for (size_t k = 0; k < n; ++k) {
          RANK_CHECK(cs[k].op == Op::kRemoteWrite && cs[k].status == Status::kSuccess);
          RANK_CHECK(cs[k].imm == 1000 + next && cs[k].bytes == size_of(next));
          RANK_CHECK(checksum(buf.data() + off[next], size_of(next)) == fill_checksum(size_of(next), next));
          ++next;
        }
      }
      RANK_CHECK(next == kWrites);
    }
    RANK_OK(r.bootstrap->barrier("vword/done"));
    return 0;
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// A GID index that does not exist, or one without an IPv4 address (index 0,
// the fe80:: GID), fails Device::open at once with an error that says so.
TEST(VerbsTransport, WrongGidIndexIsAClearError) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "verbs GID choice";
  // In a child: librdmacm keeps the devices it opened for the life of the
  // process, and ranks forked later by this test binary must not inherit them
  // (a forked child's verbs calls on its parent's device fail with EACCES).
  auto res = run_ranks(1, [](Rank&) -> int {
    ::unsetenv("GREX_IB_GID_INDEX");  // the environment overrides the parameter: take it away for this case
    auto o = verbs_options({{"gid_index", "1000"}});
    uint64_t t0 = now_ns();
    auto d = Device::open(o);
    RANK_CHECK(!d.ok());
    std::fprintf(stderr, "gid 1000: %s\n", d.error().message().c_str());
    RANK_CHECK(d.error().code() == Errc::kNotFound);
    RANK_CHECK(d.error().message().find("no GID index 1000") != std::string::npos);
    o.params["gid_index"] = "0";
    auto z = Device::open(o);
    RANK_CHECK(!z.ok());
    std::fprintf(stderr, "gid 0: %s\n", z.error().message().c_str());
    RANK_CHECK(z.error().message().find("not an IPv4-mapped GID") != std::string::npos);
    RANK_CHECK(now_ns() - t0 < 5'000'000'000ull);  // an error, not a hang
    return 0;
  }, 60);
  ASSERT_EQ(res.codes.size(), 1u);
  EXPECT_EQ(res.codes[0], 0);
}

// Rank 1 posts a 64 MiB receive, takes part for 100 ms and is SIGKILLed
// while rank 0 sends it 64 MiB plus a second 64 MiB send on a tag rank 1
// never receives (so a request is pending whatever the link speed). The
// survivor's requests end with kPeerGone naming rank 1 (or kSuccess for the
// first, if it finished) within 5 s, with IB timeout 12 and retry count 2;
// the endpoint takes no further traffic.
TEST(VerbsTransport, PeerKilledMidTransfer) {
  REQUIRE_VERBS();
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "vkill", verbs_options({{"timeout", "12"}, {"retry_cnt", "2"}}));
    RANK_OK(link);
    Device& dev = *link->dev;
    std::vector<uint8_t> buf(64u << 20, 1);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    RANK_OK(r.bootstrap->barrier("vkill/ready"));
    std::vector<Completion> done;
    if (r.rank == 1) {
      std::vector<RecvRequest> q = {{*mr, 0, buf.size(), 1, 1}};
      RANK_CHECK(post_all(dev, q, [&](auto x) { return link->to(0).post_recv(x); }, &done));
      Completion cs[4];
      Deadline dl = Deadline::after_ms(100);
      while (!dl.expired()) dev.poll(cs);  // take part for a moment, then die
      ::raise(SIGKILL);
    }
    std::vector<SendRequest> s = {{*mr, 0, buf.size(), 1, 7}, {*mr, 0, buf.size(), 2, 8}};
    uint64_t t0 = now_ns();
    RANK_CHECK(post_all(dev, s, [&](auto x) { return link->to(1).post_send(x); }, &done));
    RANK_CHECK(drain(dev, 2, &done, 30'000));
    uint64_t ms = (now_ns() - t0) / 1'000'000;
    int gone = 0;
    for (auto& c : done) {
      print_completion("survivor", c);
      RANK_CHECK(c.op == Op::kSend && c.peer == 1);
      RANK_CHECK(c.status == Status::kPeerGone || (c.status == Status::kSuccess && c.context == 7));
      gone += c.status == Status::kPeerGone;
    }
    std::fprintf(stderr, "survivor: sends ended after %llu ms\n", static_cast<unsigned long long>(ms));
    RANK_CHECK(gone >= 1);
    RANK_CHECK(ms < 5'000);
    RANK_CHECK(link->to(1).peer_failed());
    RANK_CHECK(link->to(1).describe_peer().find("rank 1") != std::string::npos);
    // The endpoint is dead: a later send is refused, or completes with an error.
    std::vector<SendRequest> again = {{*mr, 0, 16, 3, 9}};
    PostResult pr = link->to(1).post_send(again);
    if (pr.count == 0) {
      RANK_CHECK(pr.error != Errc::kOk);
    } else {
      done.clear();
      RANK_CHECK(drain(dev, 1, &done, 10'000));
      print_completion("send after the failure", done[0]);
      RANK_CHECK(done[0].context == 9 && done[0].status != Status::kSuccess);
    }
    return 0;
  }, 90);
  ASSERT_EQ(res.codes.size(), 2u);
  EXPECT_EQ(res.codes[0], 0);
  EXPECT_EQ(res.codes[1], 128 + SIGKILL);
}

// What the device reports, in one process: verbs capabilities, the active MTU
// (4096 on softroce.sh's rxe over a 9000-byte-MTU dummy), and the dma-buf
// probe counter (0 on rxe: ibv_reg_dmabuf_mr returns EOPNOTSUPP there).
TEST(VerbsTransport, CapabilitiesAndCounters) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "verbs-only checks; the driver under test is " << verbs_driver();
  auto res = run_ranks(1, [](Rank& r) -> int {
    DeviceOptions o = verbs_options();
    o.job_id = "vcaps-" + std::to_string(::getpid());
    o.rank = r.rank;
    auto d = Device::open(o);
    RANK_OK(d);
    const Capabilities& c = (*d)->capabilities();
    std::fprintf(stderr, "caps: driver %s device %s mtu %u speed %llu Mb/s max_message %llu queue_depth %u batch %u\n",
                 c.driver.c_str(), c.device_name.c_str(), c.mtu_bytes,
                 static_cast<unsigned long long>(c.link_speed_mbps),
                 static_cast<unsigned long long>(c.max_message_bytes), c.queue_depth, c.max_post_batch);
    RANK_CHECK(c.driver == "verbs");
    RANK_CHECK(!c.device_name.empty());
    if (auto want = env_or("GREX_RXE_DEV"); !want.empty()) RANK_CHECK(c.device_name == want);
    RANK_CHECK(c.mtu_bytes >= 1024 && c.mtu_bytes <= 4096 && (c.mtu_bytes & (c.mtu_bytes - 1)) == 0);
    if (under_softroce()) RANK_CHECK(c.mtu_bytes == 4096);
    RANK_CHECK(c.link_speed_mbps > 0);
    RANK_CHECK(c.write_imm && c.send_recv && c.zero_copy_send);
    RANK_CHECK(c.max_message_bytes >= (64u << 20));  // SizesUpTo64MiB sends that in one message
    RANK_CHECK(c.queue_depth > 0 && c.max_post_batch > 0);
    int dmabuf = -1;
    for (auto& [k, v] : (*d)->counters()) {
      std::fprintf(stderr, "counter %s = %llu\n", k.c_str(), static_cast<unsigned long long>(v));
      if (k == "dmabuf_supported") dmabuf = static_cast<int>(v);
    }
    RANK_CHECK(dmabuf == 0 || dmabuf == 1);
    if (under_softroce()) RANK_CHECK(dmabuf == 0);
    return 0;
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

#ifdef GREX_HAVE_VERBS
// The device's packet pacing for RC queue pairs, asked of rdma-core directly:
// the per-QP rate limit's maximum in kbit/s, 0 where it is not offered.
uint32_t rc_pacing_max_kbps(const std::string& device) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  uint32_t max = 0;
  for (int i = 0; i < n; ++i) {
    if (device != ibv_get_device_name(list[i])) continue;
    if (ibv_context* ctx = ibv_open_device(list[i])) {
      ibv_device_attr_ex ex{};
      if (ibv_query_device_ex(ctx, nullptr, &ex) == 0 &&
          (ex.packet_pacing_caps.supported_qpts & (1u << IBV_QPT_RC)) != 0)
        max = ex.packet_pacing_caps.qp_rate_limit_max;
      ibv_close_device(ctx);
    }
  }
  ibv_free_device_list(list);
  return max;
}
#endif

// GREX_IB_RATE_LIMIT: "nic" opens only where the device offers a per-QP rate
// limit for RC (Soft-RoCE offers none; neither does upstream mlx5, which
// offers it for raw packet QPs), and otherwise fails at once saying so; the
// counter nic_rate_limit_max_kbps reports what is offered; a word that is not
// a mode is an error.
TEST(VerbsTransport, NicRateLimitOnlyWhereOffered) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "verbs rate limits";
#ifdef GREX_HAVE_VERBS
  auto res = run_ranks(1, [](Rank& r) -> int {
    DeviceOptions o = verbs_options();
    o.job_id = "vrate-" + std::to_string(::getpid());
    o.rank = r.rank;
    auto d = Device::open(o);
    RANK_OK(d);
    const uint32_t offered = rc_pacing_max_kbps((*d)->capabilities().device_name);
    uint64_t reported = ~0ull;
    for (auto& [k, v] : (*d)->counters())
      if (k == "nic_rate_limit_max_kbps") reported = v;
    std::fprintf(stderr, "%s: RC packet pacing up to %u kbit/s\n", (*d)->capabilities().device_name.c_str(), offered);
    RANK_CHECK(reported == offered);
    if (under_softroce()) RANK_CHECK(offered == 0);
    d->reset();
    o.params["rate_limit"] = "nic";
    auto nic = Device::open(o);
    if (offered > 0) {
      RANK_OK(nic);
    } else {
      RANK_CHECK(!nic.ok());
      RANK_CHECK(nic.error().code() == Errc::kNotSupported);
      RANK_CHECK(nic.error().message().find("no per-QP rate limit for RC") != std::string::npos);
    }
    o.params["rate_limit"] = "hardware";
    auto bad = Device::open(o);
    RANK_CHECK(!bad.ok() && bad.error().code() == Errc::kInvalidArgument);
    return 0;
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
#endif
}

// A host pointer registered as MemoryDomain::kCudaDevice (on a host without
// CUDA, or anywhere: it is not device memory) fails with a message, leaves no
// registration behind, and the device still registers host memory after it.
TEST(VerbsTransport, CudaRegistrationFailsCleanly) {
  REQUIRE_VERBS();
  auto res = run_ranks(1, [](Rank& r) -> int {
    DeviceOptions o = verbs_options();
    o.job_id = "vcuda-" + std::to_string(::getpid());
    o.rank = r.rank;
    auto d = Device::open(o);
    RANK_OK(d);
    std::vector<uint8_t> buf(1 << 20);
    auto bad = (*d)->register_memory(buf.data(), buf.size(), MemoryDomain::kCudaDevice);
    RANK_CHECK(!bad.ok());
    std::fprintf(stderr, "kCudaDevice registration: %s (%s)\n", bad.error().message().c_str(),
                 std::string(errc_name(bad.error().code())).c_str());
    RANK_CHECK(!bad.error().message().empty());
    // NCCL's order, every mechanism named with why it was not used: the CUDA
    // driver, then dma-buf (rxe: EOPNOTSUPP from the probe), then peermem.
    const std::string m = bad.error().message();
    size_t cuda = m.find("CUDA driver: "), dmabuf = m.find("dma-buf: "), peermem = m.find("peermem: ");
    RANK_CHECK(bad.error().code() == Errc::kNotSupported);
    RANK_CHECK(cuda != std::string::npos && dmabuf != std::string::npos && peermem != std::string::npos);
    RANK_CHECK(cuda < dmabuf && dmabuf < peermem);
    if (under_softroce()) RANK_CHECK(m.find("dma-buf: not supported by " + (*d)->capabilities().device_name) != std::string::npos);
    RANK_CHECK((*d)->registration_count() == 0);
    auto good = (*d)->register_memory(buf.data(), buf.size());
    RANK_OK(good);
    RANK_OK((*d)->deregister_memory(*good));
    return 0;
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
}  // namespace grex::test
