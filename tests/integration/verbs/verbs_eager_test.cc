// SPDX-License-Identifier: Apache-2.0
// The verbs driver's eager path between two real processes, through the
// transport contract only: eager and rendezvous messages on one tag agree on
// every match (random sizes, truncation, a flood past the slots, credits
// coming back), and a small ping-pong is one eager write each way with no
// advert. Runs where verbs_driver_test runs (tests/scripts/softroce.sh).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <vector>

#include "verbs_env.h"

namespace grex::test {
namespace {

// The eager and rendezvous paths agree on every match (drivers/verbs/
// verbs_device.h): messages of 0 B .. 20 kB on 5 tags, sent in random
// batches, into receives of random sizes (exact, larger, smaller: truncated)
// posted in random batches with pauses, so eager messages arrive before
// their receive, adverts cross eager messages in flight, silent receives are
// asked for (a large message, or no credit left: 300 small messages are sent
// before any receive is posted) and small receives sit behind advertised
// ones. Per tag the j-th receive gets the j-th message: length, truncation
// and payload are checked for each.
TEST(VerbsTransport, EagerAndRendezvousAgreeOnEveryMatch) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "the verbs driver's eager path";
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto link = open_link(r, "veager", verbs_options());
    RANK_OK(link);
    Device& dev = *link->dev;
    constexpr size_t kFlood = 300, kStream = 100, kMixed = 900, kTags = 3;
    const size_t kMsgSizes[] = {0, 8, 64, 1000, 4095, 4096, 4097, 9000, 20000};
    struct Msg {
      uint64_t tag;
      size_t msg, recv;
    };
    std::vector<Msg> msgs;  // the same on both ranks: per tag, in order
    uint64_t x = 12345;
    auto rnd = [&x]() { return x = x * 6364136223846793005ull + 1442695040888963407ull, x >> 33; };
    for (size_t i = 0; i < kFlood; ++i) msgs.push_back({7, 16, 16});
    for (size_t i = 0; i < kStream; ++i) msgs.push_back({8, 16, 16});
    for (size_t i = 0; i < kMixed; ++i) {
      size_t m = kMsgSizes[rnd() % 9];
      size_t q = rnd() % 4;
      size_t recv = q == 0 ? m : q == 1 ? m + 100 : q == 2 ? (m > 0 ? m / 2 : 0) : kMsgSizes[rnd() % 9];
      msgs.push_back({rnd() % kTags, m, recv});
    }
    std::vector<size_t> off(msgs.size() + 1, 0);
    for (size_t i = 0; i < msgs.size(); ++i) off[i + 1] = off[i] + std::max(msgs[i].msg, msgs[i].recv) + 8;
    std::vector<uint8_t> buf(off.back(), 0xee);
    auto mr = dev.register_memory(buf.data(), buf.size());
    RANK_OK(mr);
    std::vector<Completion> done;
    if (r.rank == 0) {
      for (size_t i = 0; i < msgs.size(); ++i)
        for (size_t b = 0; b < msgs[i].msg; ++b) buf[off[i] + b] = static_cast<uint8_t>(i * 31 + b);
      std::vector<SendRequest> all;
      for (size_t i = 0; i < msgs.size(); ++i) all.push_back({*mr, off[i], msgs[i].msg, msgs[i].tag, i});
      RANK_CHECK(post_all(dev, std::vector<SendRequest>(all.begin(), all.begin() + kFlood),
                          [&](auto s) { return link->to(1).post_send(s); }, &done));
      RANK_CHECK(drain(dev, kFlood, &done, 60'000));
      const uint64_t flood_eager = counter_of(dev, "eager_sends");
      RANK_OK(r.bootstrap->barrier("veager/flood"));
      // One way, receives posted: eager throughout, the slots coming back as credit messages.
      RANK_CHECK(post_all(dev, std::vector<SendRequest>(all.begin() + kFlood, all.begin() + kFlood + kStream),
                          [&](auto s) { return link->to(1).post_send(s); }, &done));
      RANK_CHECK(drain(dev, kFlood + kStream, &done, 60'000));
      const uint64_t stream_eager = counter_of(dev, "eager_sends") - flood_eager;
      for (size_t at = kFlood + kStream; at < all.size();) {
        size_t n = std::min<size_t>(all.size() - at, 1 + rnd() % 40);
        RANK_CHECK(post_all(dev, std::vector<SendRequest>(all.begin() + at, all.begin() + at + n),
                            [&](auto s) { return link->to(1).post_send(s); }, &done));
        at += n;
        Completion cs[32];
        for (int k = static_cast<int>(rnd() % 50); k > 0; --k) {
          size_t got = dev.poll(cs);
          done.insert(done.end(), cs, cs + got);
        }
      }
      RANK_CHECK(drain(dev, msgs.size(), &done, 120'000));
      for (auto& c : done) {
        if (c.status != Status::kSuccess) print_completion("sender", c);
        RANK_CHECK(c.status == Status::kSuccess && c.op == Op::kSend);
      }
      const uint64_t eager = counter_of(dev, "eager_sends"), wants = counter_of(dev, "advert_requests");
      std::fprintf(stderr, "sender: %llu eager (%llu in the flood), %llu advert requests, %llu credit messages\n",
                   static_cast<unsigned long long>(eager), static_cast<unsigned long long>(flood_eager),
                   static_cast<unsigned long long>(wants),
                   static_cast<unsigned long long>(counter_of(dev, "credit_messages")));
      // Every slot first; past them each send asks for an advert, and goes
      // eagerly after all where slots come back before the advert.
      RANK_CHECK(flood_eager >= 64);
      // Eager again, and more messages than slots: the credits came back. (A
      // send that finds every slot taken asks for an advert, and may take it
      // if it comes before the credit: not every one of them is eager.)
      RANK_CHECK(stream_eager > 64);
      RANK_CHECK(eager < msgs.size());
      RANK_CHECK(wants > 0);  // large messages with no advert yet, and the flood past the credits
    } else {
      // The flood arrives first: unexpected messages, then no credit left.
      // Wait until it has come (a loaded or instrumented build may take
      // seconds to start sending) and then 300 ms with nothing more.
      Deadline limit = Deadline::after_ms(60'000);
      uint64_t seen = 0;
      Deadline quiet = Deadline::after_ms(300);
      while (!limit.expired() && (seen == 0 || !quiet.expired())) {
        Completion cs[32];
        size_t got = dev.poll(cs);
        done.insert(done.end(), cs, cs + got);
        if (const uint64_t u = counter_of(dev, "unexpected"); u != seen) {
          seen = u;
          quiet = Deadline::after_ms(300);
        }
      }
      std::vector<RecvRequest> all;
      for (size_t i = 0; i < msgs.size(); ++i) all.push_back({*mr, off[i], msgs[i].recv, msgs[i].tag, i});
      RANK_CHECK(post_all(dev, std::vector<RecvRequest>(all.begin(), all.begin() + kFlood),
                          [&](auto q) { return link->to(0).post_recv(q); }, &done));
      RANK_CHECK(drain(dev, kFlood, &done, 60'000));
      RANK_CHECK(post_all(dev, std::vector<RecvRequest>(all.begin() + kFlood, all.begin() + kFlood + kStream),
                          [&](auto q) { return link->to(0).post_recv(q); }, &done));
      RANK_OK(r.bootstrap->barrier("veager/flood"));
      for (size_t at = kFlood + kStream; at < all.size();) {
        size_t n = std::min<size_t>(all.size() - at, 1 + rnd() % 60);
        RANK_CHECK(post_all(dev, std::vector<RecvRequest>(all.begin() + at, all.begin() + at + n),
                            [&](auto q) { return link->to(0).post_recv(q); }, &done));
        at += n;
        if (rnd() % 8 == 0) usleep(2000);
        Completion cs[32];
        size_t got = dev.poll(cs);
        done.insert(done.end(), cs, cs + got);
      }
      RANK_CHECK(drain(dev, msgs.size(), &done, 120'000));
      // Per tag, receive j took message j: the receives and sends are the same list.
      int bad = 0;
      for (auto& c : done) {
        const size_t i = c.context;
        RANK_CHECK(c.op == Op::kRecv && i < msgs.size());
        const Msg& m = msgs[i];
        const bool trunc = m.msg > m.recv;
        const size_t n = std::min(m.msg, m.recv);
        bool ok = c.bytes == n && c.status == (trunc ? Status::kTruncated : Status::kSuccess) && c.tag == m.tag;
        for (size_t b = 0; ok && b < n; ++b) ok = buf[off[i] + b] == static_cast<uint8_t>(i * 31 + b);
        ok = ok && buf[off[i] + n] == 0xee;
        if (!ok && bad++ < 5) {
          std::fprintf(stderr, "receive %zu: message %zu B into %zu B\n", i, m.msg, m.recv);
          print_completion("receiver", c);
        }
      }
      RANK_CHECK(bad == 0);
      const uint64_t unexpected = counter_of(dev, "unexpected"), adverts = counter_of(dev, "adverts");
      std::fprintf(stderr, "receiver: %llu unexpected, %llu adverts\n", static_cast<unsigned long long>(unexpected),
                   static_cast<unsigned long long>(adverts));
      RANK_CHECK(unexpected > 0 && adverts > 0);
    }
    RANK_OK(r.bootstrap->barrier("veager/done"));
    return 0;
  }, 240);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// A ping-pong of 8-byte messages, each receive posted before its message
// leaves: one eager write each way and no advert at all, as ib_send_lat
// sends one SEND each way. With GREX_IB_EAGER=0 (eager off on either side)
// every receive is advertised instead, and the same exchange still works.
TEST(VerbsTransport, SmallPingPongIsOneEagerWriteEachWay) {
  REQUIRE_VERBS();
  if (!testing_verbs()) GTEST_SKIP() << "the verbs driver's eager path";
  for (const char* eager : {"4096", "0"}) {
    auto res = run_ranks(2, [eager](Rank& r) -> int {
      // Eager off on rank 1 alone must turn it off for both.
      auto link = open_link(r, "vpong", verbs_options({{"eager", r.rank == 1 ? eager : "4096"}}));
      RANK_OK(link);
      Device& dev = *link->dev;
      constexpr int kRounds = 500;
      std::vector<uint8_t> buf(64, 0);
      auto mr = dev.register_memory(buf.data(), buf.size());
      RANK_OK(mr);
      Endpoint& ep = link->to(1 - r.rank);
      int recvs = 0, sends = 0;
      auto wait_for = [&](int want_recvs, int want_sends) {
        Deadline dl = Deadline::after_ms(20'000);
        Completion cs[8];
        while ((recvs < want_recvs || sends < want_sends) && !dl.expired()) {
          const size_t n = dev.poll(cs);
          for (size_t k = 0; k < n; ++k) {
            if (cs[k].status != Status::kSuccess) print_completion("ping-pong", cs[k]);
            (cs[k].op == Op::kRecv ? recvs : sends) += cs[k].status == Status::kSuccess ? 1 : 0;
          }
        }
        return recvs >= want_recvs && sends >= want_sends;
      };
      auto recv = [&]() {
        RecvRequest q{*mr, 32, 8, 5, 1};
        return ep.post_recv(std::span(&q, 1)).count == 1;
      };
      auto send = [&](int i) {
        const uint64_t v = static_cast<uint64_t>(i) * 2 + static_cast<uint64_t>(r.rank);
        std::memcpy(buf.data(), &v, 8);
        SendRequest s{*mr, 0, 8, 5, 2};
        return ep.post_send(std::span(&s, 1)).count == 1;
      };
      // As grex-perf send_lat: the client posts its receive, then its
      // message; the server answers each message after posting its next receive.
      if (r.rank == 1) RANK_CHECK(recv());
      RANK_OK(r.bootstrap->barrier("vpong/ready"));
      auto check = [&](int i) {  // before the next receive is posted: the peer may write into it then
        uint64_t got;
        std::memcpy(&got, buf.data() + 32, 8);
        return got == static_cast<uint64_t>(i) * 2 + static_cast<uint64_t>(1 - r.rank);
      };
      for (int i = 0; i < kRounds; ++i) {
        if (r.rank == 0) {
          RANK_CHECK(recv() && send(i));
          RANK_CHECK(wait_for(i + 1, i + 1) && check(i));
        } else {
          RANK_CHECK(wait_for(i + 1, i) && check(i));
          RANK_CHECK(recv() && send(i));
        }
      }
      RANK_CHECK(wait_for(kRounds, kRounds));
      const uint64_t eager_sends = counter_of(dev, "eager_sends"), adverts = counter_of(dev, "adverts");
      std::fprintf(stderr, "rank %d (eager %s): %llu eager sends, %llu adverts\n", r.rank, eager,
                   static_cast<unsigned long long>(eager_sends), static_cast<unsigned long long>(adverts));
      if (std::string(eager) == "0") {
        RANK_CHECK(eager_sends == 0 && adverts >= kRounds);
      } else {
        RANK_CHECK(eager_sends == kRounds && adverts == 0);
      }
      RANK_OK(r.bootstrap->barrier("vpong/done"));
      return 0;
    }, 120);
    EXPECT_TRUE(res.all_ok()) << "eager " << eager << ": " << res.describe();
  }
}

}  // namespace
}  // namespace grex::test
