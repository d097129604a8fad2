// SPDX-License-Identifier: Apache-2.0
// Issue 31: the dpdk driver's choice of sprayed path (drivers/dpdk/dpdk_paths.h)
// against a model of paths with their own RTTs: a slow path (a queue built
// there) is used less under REPS once the ACKs' echoes show it slow, is tried
// again now and then, and is trusted again when its samples come back fast.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "drivers/dpdk/dpdk_paths.h"

namespace grex::dpdk {
namespace {

struct Share {
  std::vector<uint64_t> sent;  // packets per path
  uint64_t total = 0;
  double of(uint32_t p) const { return total == 0 ? 0 : static_cast<double>(sent[p]) / static_cast<double>(total); }
};

// `packets` data packets, at most `window` in flight, one sent per microsecond
// while the window allows; each path delivers after its RTT, and the ACK comes
// back at once with the packet's echo and the cumulative ACK.
Share spray(PathChooser& pc, const std::vector<uint64_t>& rtt_us, uint32_t first_psn, uint32_t packets,
            uint32_t window) {
  Share s;
  s.sent.assign(rtt_us.size(), 0);
  std::multimap<uint64_t, std::pair<uint32_t, uint64_t>> arrivals;  // at -> (psn, sent at)
  std::set<uint32_t> got;
  uint32_t next = first_psn, ack = first_psn;
  for (uint64_t now = 0; ack != first_psn + packets; ++now) {
    if (next != first_psn + packets && next - ack < window) {
      const uint32_t path = pc.choose(next);
      ++s.sent[path];
      ++s.total;
      arrivals.emplace(now + rtt_us[path], std::make_pair(next, now));
      ++next;
    }
    while (!arrivals.empty() && arrivals.begin()->first <= now) {
      auto [psn, sent_at] = arrivals.begin()->second;
      arrivals.erase(arrivals.begin());
      got.insert(psn);
      while (got.count(ack) != 0) got.erase(ack++);
      pc.rtt_sample(psn, (now - sent_at) * 1000);
      pc.acked(ack);
    }
  }
  return s;
}

TEST(PathChooser, RepsUsesASlowPathLessAndComesBackWhenItRecovers) {
  const std::vector<uint64_t> slow = {20, 20, 2000, 20}, healthy = {20, 20, 20, 20};
  PathChooser rr, reps;
  rr.reset(4, false, 1024, 7);
  reps.reset(4, true, 1024, 7);
  const Share r = spray(rr, slow, 0, 40'000, 64);
  const Share p = spray(reps, slow, 0, 40'000, 64);
  std::fprintf(stderr, "slow path 2: rr %.3f of the packets, reps %.3f (srtt %llu us, %llu slow samples)\n", r.of(2),
               p.of(2), static_cast<unsigned long long>(reps.srtt_ns(2) / 1000),
               static_cast<unsigned long long>(reps.slow_marks(2)));
  EXPECT_NEAR(r.of(2), 0.25, 0.01);  // round robin: its quarter, whatever the path does
  EXPECT_GT(p.of(2), 0.002);         // still probed now and then
  EXPECT_GT(reps.reprobes(), 0u);
  EXPECT_LT(p.of(2), 0.05);
  EXPECT_GT(reps.slow_marks(2), 0u);
  EXPECT_GT(reps.srtt_ns(2), 10 * reps.srtt_ns(0));
  // The path recovers: a probe finds it fast, and it is reused again.
  const uint64_t marks = reps.slow_marks(2);
  const Share back = spray(reps, healthy, 40'000, 40'000, 64);
  std::fprintf(stderr, "after recovery: reps %.3f on path 2\n", back.of(2));
  EXPECT_GT(back.of(2), 0.03);  // its entropies put back once a probe came back fast
  EXPECT_EQ(reps.slow_marks(2), marks);
  EXPECT_LT(reps.srtt_ns(2), 200'000u);
}

TEST(PathChooser, EqualPathsAreNeverSlow) {
  PathChooser reps;
  reps.reset(8, true, 1024, 3);
  const Share s = spray(reps, std::vector<uint64_t>(8, 30), 0, 20'000, 128);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(reps.slow_marks(i), 0u) << "path " << i;
    EXPECT_GT(s.of(i), 0.0) << "path " << i;
  }
}

TEST(PathChooser, EchoesOfPacketsNoLongerTrackedAreIgnored) {
  PathChooser pc;
  pc.reset(4, true, 64, 1);
  for (uint32_t psn = 0; psn < 200; ++psn) pc.choose(psn);
  pc.rtt_sample(10, 5'000'000);   // long since reused slot: whose path is unknown
  pc.rtt_sample(500, 5'000'000);  // never sent
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(pc.srtt_ns(i), 0u);
  pc.rtt_sample(199, 40'000);
  uint64_t sum = 0;
  for (uint32_t i = 0; i < 4; ++i) sum += pc.srtt_ns(i);
  EXPECT_EQ(sum, 40'000u);
}

}  // namespace
}  // namespace grex::dpdk
