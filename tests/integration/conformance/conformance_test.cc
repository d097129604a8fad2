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
//
// This file: capabilities, sizes, per-tag order, truncation; the one-sided
// checks and bounds are in conformance_one_sided_test.cc, full queues and
// failures in conformance_failure_test.cc; what they share in
// conformance_checks.h.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "conformance_checks.h"

namespace grex::test {
namespace {

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

}  // namespace
}  // namespace grex::test
