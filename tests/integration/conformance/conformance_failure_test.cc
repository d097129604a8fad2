// SPDX-License-Identifier: Apache-2.0
// The transport contract under pressure and failure (see conformance_test.cc):
// full queues push back and lose nothing; an abort announcement names the
// culprit; a peer's death fails what is pending within the driver's bound.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "conformance_checks.h"

namespace grex::test {
namespace {

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
