// SPDX-License-Identifier: Apache-2.0
// Issue 31: receiver credits in the reliable flow. The receiver grants data
// packets (here one every 10 us, as its driver's pacer would at its line
// rate); the sender sends new data only within the grants, so what it has
// sent never runs ahead of them, and the transfer takes the grants' pace.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "tests/unit/protocol/flow_net.h"

namespace grex::reliable {
namespace {

using namespace test;  // NOLINT: the harness (flow_net.h)

struct Paced {
  bool ok = false;
  uint64_t steps = 0, max_ahead = 0;
  FlowStats a, b;
};

// 2 MB from a to b in 20 messages; b grants one packet every `every` steps
// (1 us each) while it wants credit.
Paced paced_transfer(bool credits, uint64_t every, double drop = 0) {
  Config cfg;
  cfg.max_payload = 1400;
  cfg.window = 256;
  cfg.rto_initial_ns = 200'000;
  cfg.credits = credits;
  FaultConfig f;
  f.drop = drop;
  f.seed = 5;
  Net net(cfg, f);
  std::vector<uint8_t> src(2'000'000), dst(2'000'000, 0);
  for (size_t k = 0; k < src.size(); ++k) src[k] = pattern(9, k);
  TestRegion rs(src.data(), src.size(), 1), rd(dst.data(), dst.size(), 2);
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(net.b->post_recv({&rd, i * 100'000ull, 100'000, 1, 100ull + i}));
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(net.a->post_send({&rs, i * 100'000ull, 100'000, 1, uint64_t(i)}));
  std::vector<Completion> ca, cb;
  Completion buf[64];
  Paced r;
  for (; r.steps < 20'000'000 && (ca.size() < 20 || cb.size() < 20); ++r.steps) {
    if (credits && r.steps % every == 0 && net.b->wants_credit(net.now)) net.b->grant(1);
    net.step();
    size_t n = net.a->poll_completions(buf);
    ca.insert(ca.end(), buf, buf + n);
    n = net.b->poll_completions(buf);
    cb.insert(cb.end(), buf, buf + n);
    const uint64_t sent = net.a->stats().data_sent - net.a->stats().retransmits;  // new data packets
    const uint64_t granted = cfg.credit_initial + net.b->stats().credits_granted;
    if (sent > granted) r.max_ahead = std::max(r.max_ahead, sent - granted);
  }
  r.ok = ca.size() == 20 && cb.size() == 20 && src == dst;
  for (const auto& c : cb) r.ok = r.ok && c.status == Status::kSuccess && c.bytes == 100'000;
  r.a = net.a->stats();
  r.b = net.b->stats();
  return r;
}

TEST(ReliableCredits, TheSenderStaysWithinTheGrants) {
  const Paced free_run = paced_transfer(false, 10);
  const Paced granted = paced_transfer(true, 10);
  ASSERT_TRUE(free_run.ok);
  ASSERT_TRUE(granted.ok);
  const uint64_t packets = granted.a.data_sent - granted.a.retransmits;
  std::fprintf(stderr, "free: %llu us; granted every 10 us: %llu us for %llu packets, %llu granted, %llu waits\n",
               static_cast<unsigned long long>(free_run.steps), static_cast<unsigned long long>(granted.steps),
               static_cast<unsigned long long>(packets), static_cast<unsigned long long>(granted.b.credits_granted),
               static_cast<unsigned long long>(granted.a.credit_waits));
  EXPECT_EQ(granted.max_ahead, 0u);  // never a packet beyond the grants
  EXPECT_GT(granted.a.credit_waits, 0u);
  // The grants' pace: about 10 us a packet, less the initial credit.
  EXPECT_GT(granted.steps, 10 * (packets - 16) * 9 / 10);
  EXPECT_LT(granted.steps, 10 * packets * 12 / 10);
  EXPECT_LT(free_run.steps * 3, granted.steps);
  // Grants stop at credit_window ahead of what arrived, not at what was posted.
  EXPECT_LE(granted.b.credits_granted, packets + 64);
}

TEST(ReliableCredits, LossUnderGrantsIsRepaired) {
  const Paced r = paced_transfer(true, 5, 0.02);
  ASSERT_TRUE(r.ok);
  EXPECT_GT(r.a.retransmits, 0u);
  EXPECT_EQ(r.max_ahead, 0u);
}

}  // namespace
}  // namespace grex::reliable
