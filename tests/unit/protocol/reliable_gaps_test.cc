// SPDX-License-Identifier: Apache-2.0
// A host that stops reading its receive ring (a compute phase, a
// preemption) is not a congested path: the receiver reports its gap in the
// ACKs and probe replies (wire::Header::remote), the sender judges the RTO
// that gap caused spurious, and a caller that has not read its ring yet runs
// no timers.
#include <gtest/gtest.h>

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
    if (h.type == wire::Type::kTimingResp) EXPECT_EQ(h.remote, 2'500'000u);
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
