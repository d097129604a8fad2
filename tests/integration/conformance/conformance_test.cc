// SPDX-License-Identifier: Apache-2.0
// The transport contract (grex/transport.h), checked the same way on every
// driver: one source, run once per driver (meson suite `conformance`; the
// driver comes from GREX_CONFORMANCE_DRIVER, see conformance_driver.h).
//
// Two ranks, through the contract only: capabilities and the registration
// cache; sizes 0 B .. 64 MiB; per-tag FIFO order with interleaved tags and
// receives posted late; truncation; writes with immediate; out-of-bounds
// requests; full queues (partial PostResult counts, nothing lost); one-sided
// reads and load/store mapping where the capabilities offer them; abort
// announcements; peer death. A check the driver has no capability for skips
// and says so; a driver that cannot run here skips every check, saying why.
// Payloads are checked by checksum.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "conformance_driver.h"

namespace grex::test {
namespace {

class Conformance : public ::testing::Test {
 protected:
  void SetUp() override {
    const Probe& p = Driver::get().probe();
    if (p.kind == Probe::kSkip) GTEST_SKIP() << p.why;
    if (p.kind == Probe::kFail) FAIL() << p.why;
  }
  Driver& driver = Driver::get();
};

#define EXPECT_RANKS_OK(res) EXPECT_TRUE((res).all_ok()) << (res).describe() << " (driver " << driver.name() << ")"

/// The driver's link for `r`, with `extra` params and, when nonzero, a queue depth.
Result<Link> open(Rank& r, const char* name, const std::map<std::string, std::string>& extra = {},
                  uint32_t queue_depth = 0) {
  DeviceOptions o = Driver::get().options(r.rank, extra);
  if (queue_depth > 0) o.queue_depth = queue_depth;
  return open_link(r, name, o);
}

bool send_all(Device& dev, Endpoint& ep, const std::vector<SendRequest>& v, std::vector<Completion>* done) {
  return post_all(dev, v, [&](auto s) { return ep.post_send(s); }, done);
}
bool recv_all(Device& dev, Endpoint& ep, const std::vector<RecvRequest>& v, std::vector<Completion>* done) {
  return post_all(dev, v, [&](auto s) { return ep.post_recv(s); }, done);
}
bool write_all(Device& dev, Endpoint& ep, const std::vector<WriteRequest>& v, std::vector<Completion>* done) {
  return post_all(dev, v, [&](auto s) { return ep.post_write(s); }, done);
}

/// Every rank's RemoteRegion of `mr`, by rank.
Result<std::vector<RemoteRegion>> exchange_regions(Rank& r, const std::string& name, const MemoryRegion* mr) {
  RemoteRegion mine = mr->remote();
  auto all = GREX_TRY(r.bootstrap->all_gather(name, std::string(reinterpret_cast<char*>(&mine), sizeof(mine))));
  std::vector<RemoteRegion> out(all.size());
  for (size_t i = 0; i < all.size(); ++i) std::memcpy(&out[i], all[i].data(), sizeof(RemoteRegion));
  return out;
}

/// Polls (a target must, for drivers whose one-sided operations progress in
/// the target's poll) until the peer sets `key` in the store; completions go to `seen`.
bool serve_until(Rank& r, Device& dev, const std::string& key, std::vector<Completion>* seen,
                 int64_t timeout_ms = 60'000) {
  Deadline dl = Deadline::after_ms(timeout_ms);
  const std::string keys[] = {key};
  Completion cs[16];
  for (uint32_t i = 0;; ++i) {
    size_t n = dev.poll(cs);
    seen->insert(seen->end(), cs, cs + n);
    if (i % 256 == 0) {
      auto there = r.bootstrap->store().check(keys);
      if (there.ok() && (*there)[0]) return true;
      if (dl.expired()) return false;
    }
  }
}

void signal(Rank& r, const std::string& key) { (void)r.bootstrap->store().set(key, "1"); }

/// The end of a check: a barrier during which both ranks keep polling. A
/// driver that makes progress only in poll() (dpdk) must still acknowledge
/// the peer's last packets, or resend its own, after its own work is done.
bool finish(Rank& r, Device& dev, const std::string& name) {
  signal(r, name + "/" + std::to_string(r.rank));
  std::vector<Completion> late;
  return serve_until(r, dev, name + "/" + std::to_string(1 - r.rank), &late);
}

// ---------------------------------------------------------------- capabilities

// What every device says of itself, the registration cache of the Device
// base, and the rule that an operation a driver lacks answers "not supported".
TEST_F(Conformance, CapabilitiesAndRegistrationCache) {
  auto res = driver.run([&](Rank& r) -> int {
    auto link = open(r, "ccaps");
    RANK_OK(link);
    Device& dev = *link->dev;
    const Capabilities& c = dev.capabilities();
    const std::string want = driver.name().substr(0, driver.name().find('-'));
    RANK_CHECK(c.driver == want);
    RANK_CHECK(!c.device_name.empty());
    RANK_CHECK(c.send_recv);
    RANK_CHECK(c.queue_depth > 0 && c.max_post_batch > 0);
    RANK_CHECK(c.max_message_bytes >= (64u << 20));  // SizesZeroTo64MiB sends that in one message
    std::vector<uint8_t> buf(1 << 16);
    auto a = dev.register_memory(buf.data(), buf.size());
    RANK_OK(a);
    auto b = dev.register_memory(buf.data() + 100, 1000);  // inside a: the same registration
    RANK_OK(b);
    RANK_CHECK(*a == *b && dev.registration_count() == 1);
    RANK_OK(dev.deregister_memory(*b));
    RANK_CHECK(dev.registration_count() == 1);  // a still holds it
    Endpoint& ep = link->to(1 - r.rank);
    if (!c.read) {
      ReadRequest rd{*a, 0, 8, (*a)->remote(), 0, 1};
      PostResult pr = ep.post_read({&rd, 1});
      RANK_CHECK(pr.count == 0 && pr.error == Errc::kNotSupported);
    }
    if (!c.load_store) {
      auto m = ep.map((*a)->remote());
      RANK_CHECK(!m.ok() && m.error().code() == Errc::kNotSupported);
    }
    RANK_OK(dev.deregister_memory(*a));
    RANK_CHECK(dev.registration_count() == 0);
    RANK_CHECK(dev.deregister_memory(*a).error().code() == Errc::kNotFound);
    auto big = dev.allocate(1 << 20);
    RANK_OK(big);
    RANK_CHECK((*big)->length() >= (1u << 20));
    RANK_OK(dev.free(*big));
    RANK_CHECK(dev.registration_count() == 0);
    RANK_CHECK(finish(r, dev, "ccaps/done"));
    return 0;
  });
  EXPECT_RANKS_OK(res);
}

// ---------------------------------------------------------------- sizes and order

// One message of each size, 0 B to 64 MiB (88 MiB in all): sizes around
// every driver's thresholds (verbs' 4 KiB eager, shm's 8128-byte slot, a
// 9000-byte frame) and ones that need many packets. Tags i % 4.
TEST_F(Conformance, SizesZeroTo64MiB) {
  auto res = driver.run([&](Rank& r) -> int {
    const std::vector<size_t> sizes = {0, 1, 7, 4095, 4097, 8129, 8833, 65536, (1u << 20) + 3, 16u << 20, 64u << 20};
    auto link = open(r, "csz");
    RANK_OK(link);
    Device& dev = *link->dev;
    std::vector<size_t> off(sizes.size() + 1, 0);
    for (size_t i = 0; i < sizes.size(); ++i) off[i + 1] = off[i] + sizes[i];
    std::vector<uint8_t> buf(off.back() + 1, 0xee);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    std::vector<Completion> done;
    if (r.rank == 0) {
      std::vector<SendRequest> reqs;
      for (size_t i = 0; i < sizes.size(); ++i) {
        fill(buf.data() + off[i], sizes[i], i);
        reqs.push_back({*mr, off[i], sizes[i], i % 4, i});
      }
      RANK_CHECK(send_all(dev, link->to(1), reqs, &done));
      RANK_CHECK(drain(dev, reqs.size(), &done, 120'000));
      for (auto& c : done) {
        if (c.status != Status::kSuccess) print_completion("sender", c);
        RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kSend && c.peer == 1);
        RANK_CHECK(c.context < sizes.size() && c.bytes == sizes[c.context] && c.tag == c.context % 4);
      }
    } else {
      std::vector<RecvRequest> reqs;
      for (size_t i = 0; i < sizes.size(); ++i) reqs.push_back({*mr, off[i], sizes[i], i % 4, i});
      RANK_CHECK(recv_all(dev, link->to(0), reqs, &done));
      RANK_CHECK(drain(dev, reqs.size(), &done, 120'000));
      std::set<uint64_t> seen;
      for (auto& c : done) {
        const size_t i = c.context;
        if (c.status != Status::kSuccess || i >= sizes.size() || c.bytes != sizes[i]) print_completion("receiver", c);
        RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kRecv && c.peer == 0);
        RANK_CHECK(i < sizes.size() && seen.insert(i).second);
        RANK_CHECK(c.bytes == sizes[i] && c.tag == i % 4);
        RANK_CHECK(checksum(buf.data() + off[i], sizes[i]) == fill_checksum(sizes[i], i));
      }
      RANK_CHECK(buf.back() == 0xee);  // nothing past the last message
    }
    RANK_CHECK(finish(r, dev, "csz/done"));
    RANK_OK(dev.deregister_memory(*mr));
    return 0;
  }, 300);
  EXPECT_RANKS_OK(res);
}

// 500 messages of mixed size (8 B .. 30 KB, every 50th 200 KB) in flight at
// once on 4 interleaved tags, into receives 64 bytes larger. Within a tag
// the j-th receive gets the j-th send (each payload starts with its sequence
// number on its tag), and the slack stays untouched.
TEST_F(Conformance, PerTagFifoWithInterleavedTags) {
  auto res = driver.run([&](Rank& r) -> int {
    auto link = open(r, "cfifo");
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
      RANK_CHECK(send_all(dev, link->to(1), reqs, &done));
      RANK_CHECK(drain(dev, kMsgs, &done, 120'000));
      for (auto& c : done) RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kSend);
    } else {
      std::vector<RecvRequest> reqs;
      for (size_t i = 0; i < kMsgs; ++i) reqs.push_back({*mr, off[i], size_of(i) + kSlack, i % 4, i});
      RANK_CHECK(recv_all(dev, link->to(0), reqs, &done));
      RANK_CHECK(drain(dev, kMsgs, &done, 120'000));
      std::vector<bool> seen(kMsgs, false);
      for (auto& c : done) {
        const size_t i = c.context;
        RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kRecv);
        RANK_CHECK(i < kMsgs && !seen[i]);
        seen[i] = true;
        RANK_CHECK(c.bytes == size_of(i) && c.tag == i % 4);
        uint64_t seq;
        std::memcpy(&seq, buf.data() + off[i], 8);
        if (seq != i / 4)
          std::fprintf(stderr, "receive %zu (tag %zu) got message %llu of its tag\n", i, i % 4,
                       static_cast<unsigned long long>(seq));
        RANK_CHECK(seq == i / 4);
        RANK_CHECK(checksum(buf.data() + off[i] + 8, size_of(i) - 8) == fill_checksum(size_of(i) - 8, i));
        RANK_CHECK(buf[off[i] + size_of(i)] == 0xee);
      }
    }
    RANK_CHECK(finish(r, dev, "cfifo/done"));
    return 0;
  }, 180);
  EXPECT_RANKS_OK(res);
}

// Sends on tags 1, 2, 3 (small and large) before any receive exists; the
// receiver polls (no completion may appear), then posts receives for tags
// 3, 2, 1: each gets its own tag's payload.
TEST_F(Conformance, ReceivesPostedLateMatchTheirTags) {
  auto res = driver.run([&](Rank& r) -> int {
    auto link = open(r, "clate");
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kStride = 100'000;
    const size_t len[] = {10, 100'000, 5000};
    std::vector<uint8_t> buf(3 * kStride);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    std::vector<Completion> done;
    if (r.rank == 0) {
      std::vector<SendRequest> reqs;
      for (uint64_t t = 1; t <= 3; ++t) {
        fill(buf.data() + (t - 1) * kStride, len[t - 1], t);
        reqs.push_back({*mr, (t - 1) * kStride, len[t - 1], t, t});
      }
      RANK_CHECK(send_all(dev, link->to(1), reqs, &done));
      signal(r, "clate/sent");
      RANK_CHECK(drain(dev, 3, &done));
      for (auto& c : done) RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kSend && c.tag == c.context);
    } else {
      std::vector<Completion> early;
      RANK_CHECK(serve_until(r, dev, "clate/sent", &early));
      Completion cs[4];
      for (int i = 0; i < 2000; ++i) RANK_CHECK(dev.poll(cs) == 0);
      RANK_CHECK(early.empty());  // nothing completes without a receive
      for (uint64_t t = 3; t >= 1; --t) {
        RecvRequest q{*mr, (t - 1) * kStride, kStride, t, t};
        RANK_CHECK(recv_all(dev, link->to(0), {q}, &done));
      }
      RANK_CHECK(drain(dev, 3, &done));
      for (auto& c : done) {
        const uint64_t t = c.context;
        RANK_CHECK(c.status == Status::kSuccess && c.tag == t && c.bytes == len[t - 1]);
        RANK_CHECK(checksum(buf.data() + (t - 1) * kStride, len[t - 1]) == fill_checksum(len[t - 1], t));
      }
    }
    RANK_CHECK(finish(r, dev, "clate/done"));
    return 0;
  });
  EXPECT_RANKS_OK(res);
}

// A 100 B message into a 50 B buffer and a 100 kB one into 4096 B: the
// receiver sees kTruncated with bytes = its buffer size, the sender
// kSuccess, nothing is written past either buffer, and the connection
// stays usable (a 1 MB message after them arrives intact).
TEST_F(Conformance, TruncationIsReportedAndConnectionSurvives) {
  auto res = driver.run([&](Rank& r) -> int {
    auto link = open(r, "ctrunc");
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
      RANK_CHECK(send_all(dev, link->to(1), {{*mr, 0, 100, 5, 1}, {*mr, 0, 100'000, 6, 2}, {*mr, 200'000, kAfter, 7, 3}},
                          &done));
      RANK_CHECK(drain(dev, 3, &done, 60'000));
      for (auto& c : done) {
        if (c.status != Status::kSuccess) print_completion("sender", c);
        RANK_CHECK(c.op == Op::kSend && c.status == Status::kSuccess);
      }
    } else {
      RANK_CHECK(recv_all(dev, link->to(0), {{*mr, 0, 50, 5, 1}, {*mr, 100, 4096, 6, 2}, {*mr, 200'000, kAfter, 7, 3}},
                          &done));
      RANK_CHECK(drain(dev, 3, &done, 60'000));
      for (auto& c : done) {
        RANK_CHECK(c.op == Op::kRecv && c.peer == 0);
        if (c.context == 1) RANK_CHECK(c.status == Status::kTruncated && c.bytes == 50 && c.tag == 5);
        if (c.context == 2) RANK_CHECK(c.status == Status::kTruncated && c.bytes == 4096 && c.tag == 6);
        if (c.context == 3) RANK_CHECK(c.status == Status::kSuccess && c.bytes == kAfter && c.tag == 7);
      }
      std::vector<uint8_t> want(100);
      fill(want.data(), 100, 5);
      RANK_CHECK(std::memcmp(buf.data(), want.data(), 50) == 0);
      RANK_CHECK(checksum(buf.data() + 200'000, kAfter) == fill_checksum(kAfter, 99));
      for (size_t i = 50; i < 100; ++i) RANK_CHECK(buf[i] == 7);  // nothing written past either buffer
      for (size_t i = 100 + 4096; i < 200'000; ++i) RANK_CHECK(buf[i] == 7);
    }
    RANK_CHECK(finish(r, dev, "ctrunc/done"));
    return 0;
  });
  EXPECT_RANKS_OK(res);
}

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

// ---------------------------------------------------------------- full queues

// A queue depth of 8 and a caller that posts 48 sends (and 48 writes) in one
// call without polling: the post takes a prefix and says "full" (count <
// size, error kOk), never drops; after polling, the rest is taken. Every
// request completes exactly once, nothing more comes, and the receiver gets
// every message in per-tag order.
TEST_F(Conformance, FullQueuesPushBackAndLoseNothing) {
  auto res = driver.run([&](Rank& r) -> int {
    auto link = open(r, "cfull", {{"slots", "8"}}, 8);
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kMsgs = 48, kLen = 64;
    std::vector<uint8_t> buf(2 * kMsgs * kLen, 0);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    auto regions = exchange_regions(r, "cfull/region", *mr);
    RANK_OK(regions);
    const bool writes = dev.capabilities().write_imm;
    std::vector<Completion> done;
    if (r.rank == 0) {
      fill(buf.data(), buf.size(), 5);
      for (size_t i = 0; i < kMsgs; ++i) std::memcpy(buf.data() + i * kLen, &i, sizeof i);
      std::vector<SendRequest> s;
      for (size_t i = 0; i < kMsgs; ++i) s.push_back({*mr, i * kLen, kLen, i % 2, i + 1});
      std::vector<WriteRequest> w;
      for (size_t i = 0; i < kMsgs; ++i)
        w.push_back({*mr, (kMsgs + i) * kLen, kLen, (*regions)[1], (kMsgs + i) * kLen, 0, false, kMsgs + i + 1});
      PostResult first = link->to(1).post_send(s);
      RANK_CHECK(first.error == Errc::kOk && first.count < kMsgs);  // back-pressure, not a silent drop
      RANK_CHECK(send_all(dev, link->to(1), std::vector<SendRequest>(s.begin() + first.count, s.end()), &done));
      size_t total = kMsgs;
      if (writes) {
        PostResult wf = link->to(1).post_write(w);
        RANK_CHECK(wf.error == Errc::kOk && wf.count < kMsgs);
        RANK_CHECK(write_all(dev, link->to(1), std::vector<WriteRequest>(w.begin() + wf.count, w.end()), &done));
        total += kMsgs;
      }
      RANK_CHECK(drain(dev, total, &done, 60'000));
      std::vector<int> seen(total + 1, 0);
      for (auto& c : done) {
        if (c.status != Status::kSuccess) print_completion("full-queue sender", c);
        RANK_CHECK(c.status == Status::kSuccess && c.bytes == kLen);
        RANK_CHECK(c.context >= 1 && c.context <= total);
        RANK_CHECK(c.op == (c.context <= kMsgs ? Op::kSend : Op::kWrite));
        ++seen[c.context];
      }
      for (size_t i = 1; i <= total; ++i) RANK_CHECK(seen[i] == 1);
      Completion extra[4];
      RANK_CHECK(dev.poll(extra) == 0);
      RANK_CHECK(counter_of(dev, "cq_overflows") == 0 || counter_of(dev, "cq_overflows") == UINT64_MAX);
      signal(r, "cfull/sent");
    } else {
      std::vector<RecvRequest> q;
      for (size_t i = 0; i < kMsgs; ++i) q.push_back({*mr, i * kLen, kLen, i % 2, i + 1});
      RANK_CHECK(recv_all(dev, link->to(0), q, &done));
      RANK_CHECK(drain(dev, kMsgs, &done, 60'000));
      for (auto& c : done) {
        RANK_CHECK(c.op == Op::kRecv && c.status == Status::kSuccess && c.bytes == kLen);
        size_t got;
        std::memcpy(&got, buf.data() + (c.context - 1) * kLen, sizeof got);
        RANK_CHECK(got == c.context - 1);  // the j-th receive of a tag got the j-th send
      }
      std::vector<Completion> rest;
      RANK_CHECK(serve_until(r, dev, "cfull/sent", &rest));
      RANK_CHECK(rest.empty());
      if (writes) {
        std::vector<uint8_t> want(buf.size());
        fill(want.data(), want.size(), 5);
        RANK_CHECK(std::memcmp(buf.data() + kMsgs * kLen, want.data() + kMsgs * kLen, kMsgs * kLen) == 0);
      }
    }
    RANK_CHECK(finish(r, dev, "cfull/done"));
    return 0;
  });
  EXPECT_RANKS_OK(res);
}

// ---------------------------------------------------------------- failure

// announce_abort(culprit) reaches the peer, which names the culprit.
TEST_F(Conformance, AbortAnnouncementNamesTheCulprit) {
  auto res = driver.run([&](Rank& r) -> int {
    auto link = open(r, "cabort");
    RANK_OK(link);
    Device& dev = *link->dev;
    if (r.rank == 0) {
      RANK_CHECK(link->to(1).peer_abort_culprit() == -1);
      link->to(1).announce_abort(5);
      std::vector<Completion> seen;
      RANK_CHECK(serve_until(r, dev, "cabort/heard", &seen));
    } else {
      Completion cs[8];
      Deadline dl = Deadline::after_ms(20'000);
      while (link->to(0).peer_abort_culprit() == -1 && !dl.expired()) dev.poll(cs);
      RANK_CHECK(link->to(0).peer_abort_culprit() == 5);
      signal(r, "cabort/heard");
    }
    RANK_CHECK(finish(r, dev, "cabort/done"));
    return 0;
  });
  EXPECT_RANKS_OK(res);
}

// Rank 1 posts a 64 MiB receive, takes part for 100 ms and dies (SIGKILL; a
// loop rank destroys its device). Rank 0 has a receive pending that rank 1
// never serves, a 64 MiB send rank 1 may have taken, and one on a tag rank 1
// never receives. Every one completes, with kPeerGone (the first send may
// have finished: kSuccess) naming rank 1, within the driver's bound; the
// endpoint says peer_failed() and takes no more work.
TEST_F(Conformance, PeerDeathFailsPendingRequests) {
  auto res = driver.run([&](Rank& r) -> int {
    auto link = open(r, "cdeath", driver.death_params());
    RANK_OK(link);
    Device& dev = *link->dev;
    std::vector<uint8_t> buf(64u << 20, 1);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    RANK_OK(r.bootstrap->barrier("cdeath/ready"));
    std::vector<Completion> done;
    if (r.rank == 1) {
      RANK_CHECK(recv_all(dev, link->to(0), {{*mr, 0, buf.size(), 1, 1}}, &done));
      Completion cs[4];
      Deadline dl = Deadline::after_ms(100);
      while (!dl.expired()) dev.poll(cs);  // take part for a moment, then die
      return driver.die(*link);
    }
    const uint64_t t0 = now_ns();
    RANK_CHECK(recv_all(dev, link->to(1), {{*mr, 0, 4096, 9, 6}}, &done));
    RANK_CHECK(send_all(dev, link->to(1), {{*mr, 0, buf.size(), 1, 7}, {*mr, 0, buf.size(), 2, 8}}, &done));
    RANK_CHECK(drain(dev, 3, &done, 30'000));
    const uint64_t ms = (now_ns() - t0) / 1'000'000;
    int gone = 0;
    for (auto& c : done) {
      print_completion("survivor", c);
      RANK_CHECK(c.peer == 1);
      RANK_CHECK(c.status == Status::kPeerGone || (c.status == Status::kSuccess && c.context == 7));
      gone += c.status == Status::kPeerGone;
    }
    std::fprintf(stderr, "survivor: requests ended after %llu ms\n", static_cast<unsigned long long>(ms));
    RANK_CHECK(gone >= 2);
    RANK_CHECK(ms < driver.death_bound_ms() + 100);
    RANK_CHECK(link->to(1).peer_failed());
    RANK_CHECK(link->to(1).describe_peer().find("rank 1") != std::string::npos);
    // The endpoint is dead: a later send is refused, or completes with an error.
    PostResult pr = link->to(1).post_send(std::vector<SendRequest>{{*mr, 0, 16, 3, 9}});
    if (pr.count == 0) {
      RANK_CHECK(pr.error == Errc::kPeerFailed);
    } else {
      done.clear();
      RANK_CHECK(drain(dev, 1, &done, 10'000));
      RANK_CHECK(done[0].context == 9 && done[0].status != Status::kSuccess);
    }
    return 0;
  }, 90);
  ASSERT_EQ(res.codes.size(), 2u);
  EXPECT_EQ(res.codes[0], 0) << driver.name();
  EXPECT_EQ(res.codes[1], driver.death_code()) << driver.name();
}

}  // namespace
}  // namespace grex::test
