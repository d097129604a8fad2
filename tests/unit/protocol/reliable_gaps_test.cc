// SPDX-License-Identifier: Apache-2.0
// What is not this flow's congestion. A host that stops reading its
// receive ring (a compute phase, a preemption): the receiver reports its gap
// in the ACKs and probe replies (wire::Header::remote), the sender judges the
// RTO that gap caused spurious, and a caller that has not read its ring yet
// runs no timers. And a queue on the way back, behind the peer's own data.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "tests/unit/protocol/flow_net.h"

namespace grex::reliable {
namespace {

using namespace test;  // NOLINT: the harness (flow_net.h)

Config gap_config() {
  Config cfg;
  cfg.max_payload = 1400;
  cfg.window = 64;
  cfg.rto_initial_ns = 200'000;
  cfg.cc = cc::find("rttcc");
  cfg.line_rate_bps = 10e9;
  return cfg;
}

struct Stalled {
  FlowStats a;
  std::vector<wire::Header> replies;  // b's first packets after the stall
  bool ok = false;
};

// b stops reading for 2.5 ms while a's data is in flight, then reads it all
// and says it had not read for `reported_gap_ns`. a's RTO fires three times
// meanwhile (200, 400, 800 us, backed off).
Stalled stalled_receiver(uint64_t reported_gap_ns) {
  Net net(gap_config());
  std::vector<uint8_t> src(14'000), dst(14'000, 0);
  for (size_t k = 0; k < src.size(); ++k) src[k] = pattern(2, k);
  TestRegion rs(src.data(), src.size(), 1), rd(dst.data(), dst.size(), 2);
  Stalled r;
  EXPECT_TRUE(net.b->post_recv({&rd, 0, dst.size(), 1, 7}));
  EXPECT_TRUE(net.a->post_send({&rs, 0, src.size(), 1, 8}));
  for (int i = 0; i < 10'000 && net.a->stats().data_sent == 0; ++i) net.step();
  EXPECT_GT(net.a->stats().data_sent, 0u);
  const uint64_t stall_end = net.now + 2'500'000;
  while (net.now < stall_end) {  // a polls and reads; b neither
    net.now += net.step_ns;
    Net::pump(*net.a, net.ab, net.now);
    net.deliver(net.ba, *net.a);
  }
  EXPECT_GE(net.a->stats().timeouts, 3u);
  net.deliver(net.ab, *net.b, reported_gap_ns);
  const size_t before = net.ba.wire.size();
  Net::pump(*net.b, net.ba, net.now);
  for (size_t i = before; i < net.ba.wire.size(); ++i) {
    wire::Header h;
    EXPECT_EQ(wire::decode(net.ba.wire[i].bytes.data(), net.ba.wire[i].bytes.size(), 1 << 16, &h), wire::Reject::kNone);
    r.replies.push_back(h);
  }
  std::vector<Completion> ca, cb;
  r.ok = net.run(1, 1, &ca, &cb, 1'000'000) && src == dst;
  r.a = net.a->stats();
  return r;
}

TEST(ReliableFlow, ATimeoutTheReceiversGapExplainsIsSpurious) {
  const Stalled gap = stalled_receiver(2'500'000);
  ASSERT_TRUE(gap.ok);
  EXPECT_EQ(gap.a.spurious_timeouts, 1u);  // the latest RTO; the earlier ones were judged by none
  bool ack = false;
  for (const wire::Header& h : gap.replies) {
    if (h.type == wire::Type::kAck) {
      EXPECT_EQ(h.remote, 2'500'000u);  // the gap, as the receiver was told it
      ack = true;
    }
    if (h.type == wire::Type::kTimingResp) {
      EXPECT_EQ(h.remote, 2'500'000u);
    }
  }
  EXPECT_TRUE(ack);
  // The same lateness with no gap to explain it (the packets were held on
  // the path): a real timeout.
  const Stalled path = stalled_receiver(0);
  ASSERT_TRUE(path.ok);
  EXPECT_GE(path.a.timeouts, 3u);
  EXPECT_EQ(path.a.spurious_timeouts, 0u);
  for (const wire::Header& h : path.replies) EXPECT_EQ(h.remote, 0u);
}

// A caller that has not yet read what arrived while it was away asks for
// packets without timers: no RTO, whatever the time; with timers it fires.
TEST(ReliableFlow, NoTimerFiresBeforeTheCallerHasReadItsRing) {
  Config cfg = gap_config();
  cfg.cc = nullptr;
  Net net(cfg);
  std::vector<uint8_t> src(4'000, 1), dst(4'000, 0);
  TestRegion rs(src.data(), src.size(), 1), rd(dst.data(), dst.size(), 2);
  ASSERT_TRUE(net.b->post_recv({&rd, 0, dst.size(), 1, 7}));
  ASSERT_TRUE(net.a->post_send({&rs, 0, src.size(), 1, 8}));
  for (int i = 0; i < 10'000 && net.a->stats().data_sent == 0; ++i) net.step();
  ASSERT_GT(net.a->stats().data_sent, 0u);
  TxPacket out[kMaxTxPerPoll];
  net.now += 5'000'000;  // the data's ACK may be waiting unread
  net.a->poll_tx(out, net.now, false);  // what is due without timers (ACKs, new data) may go
  EXPECT_EQ(net.a->stats().timeouts, 0u);
  EXPECT_EQ(net.a->stats().retransmits, 0u);
  net.a->poll_tx(out, net.now, true);
  EXPECT_EQ(net.a->stats().timeouts, 1u);
  EXPECT_GE(net.a->stats().retransmits, 1u);  // the resend (and a tail probe)
}

}  // namespace
}  // namespace grex::reliable

namespace grex::reliable {
namespace {

using namespace test;  // NOLINT: the harness (flow_net.h)

// Where the peer sends data too, a probe's reply waits behind it on the way
// back; the controller is given the RTT less that reverse queueing (the
// reply's one-way delay above its minimum). After 1 ms of traffic both ways
// (or one way), the path from b to a gains 200 us of queue: a's controller
// keeps its rate while b's data flows; with no data from b it cuts.
struct Reverse {
  double rate_before = 0, rate_after = 0;
  uint64_t rev_queue_ns = 0, rtt_ns = 0;
};
Reverse reverse_queue_run(bool both_ways) {
  Config cfg = gap_config();
  cfg.cc_options.rttcc.start_rate_fraction = 0.1;
  cfg.rto_min_ns = 2'000'000;  // the delay alone: the RTT's jump from 10 to 205 us would fire RTOs
  Net net(cfg);
  constexpr size_t kMsg = 256 * 1024, kMsgs = 64;
  std::vector<uint8_t> sa(kMsg * kMsgs, 1), sb(kMsg * kMsgs, 2), da(sb.size()), db(sa.size());
  TestRegion rsa(sa.data(), sa.size(), 1), rsb(sb.data(), sb.size(), 2), rda(da.data(), da.size(), 3),
      rdb(db.data(), db.size(), 4);
  for (size_t i = 0; i < kMsgs; ++i) {
    EXPECT_TRUE(net.b->post_recv({&rdb, i * kMsg, kMsg, 1, i}));
    EXPECT_TRUE(net.a->post_send({&rsa, i * kMsg, kMsg, 1, i}));
    if (!both_ways) continue;
    EXPECT_TRUE(net.a->post_recv({&rda, i * kMsg, kMsg, 1, i}));
    EXPECT_TRUE(net.b->post_send({&rsb, i * kMsg, kMsg, 1, i}));
  }
  Completion buf[64];
  auto run_for = [&](uint64_t ns) {
    for (const uint64_t end = net.now + ns; net.now < end;) {
      net.step();
      net.a->poll_completions(buf);
      net.b->poll_completions(buf);
    }
  };
  run_for(1'000'000);
  Reverse r;
  r.rate_before = net.a->stats().cc_rate_bps;
  net.ba.latency_ns = 200'000;
  run_for(2'000'000);
  r.rate_after = net.a->stats().cc_rate_bps;
  r.rev_queue_ns = net.a->stats().rev_queue_ns;
  r.rtt_ns = net.a->stats().last_rtt_ns;
  return r;
}

TEST(ReliableFlow, AReverseQueueBehindThePeersDataIsNotThisFlowsCongestion) {
  const Reverse both = reverse_queue_run(true);
  std::fprintf(stderr, "both ways: rate %.2f -> %.2f Gbit/s, RTT %llu us, reverse queue %llu us\n",
               both.rate_before / 1e9, both.rate_after / 1e9, static_cast<unsigned long long>(both.rtt_ns / 1000),
               static_cast<unsigned long long>(both.rev_queue_ns / 1000));
  EXPECT_GT(both.rtt_ns, 200'000u);
  EXPECT_NEAR(static_cast<double>(both.rev_queue_ns), 195'000.0, 5'000.0);
  EXPECT_GE(both.rate_after, both.rate_before);  // not cut: the queue is on the way back
  const Reverse one = reverse_queue_run(false);
  std::fprintf(stderr, "one way: rate %.2f -> %.2f Gbit/s, RTT %llu us\n", one.rate_before / 1e9,
               one.rate_after / 1e9, static_cast<unsigned long long>(one.rtt_ns / 1000));
  EXPECT_GT(one.rtt_ns, 200'000u);
  EXPECT_LT(one.rate_after, 0.8 * one.rate_before);  // only ACKs come back: the whole RTT counts
}

}  // namespace
}  // namespace grex::reliable
