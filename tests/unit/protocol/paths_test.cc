// SPDX-License-Identifier: Apache-2.0
// Issue 31: the dpdk driver's choice of sprayed path (drivers/dpdk/dpdk_paths.h)
// against a model of paths with their own RTTs: a slow path (a queue built
// there) is used less under REPS once the ACKs' echoes show it slow, is tried
// again now and then, and is trusted again when its samples come back fast;
// and with a controller per path, a path with a small link is paced to it
// alone while the flow runs at the paths' summed rate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "congestion/cc.h"
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

// Paths with links of their own: each a FIFO at `gbps[p]` behind which a
// packet waits, then `base_us` of round trip. The flow's pacer is set to the
// chooser's summed rate after every ACK (as the driver does); a packet goes
// whenever that pacer allows and fewer than `window` are in flight.
struct Links {
  std::vector<double> gbps;
  uint64_t base_us = 20;
};
struct LinkRun {
  Share share;
  double goodput_gbps = 0;
  std::vector<uint64_t> worst_rtt_us;  // per path, over the run's second half
};

LinkRun paced_spray(PathChooser& pc, const Links& l, uint64_t run_us, uint32_t window) {
  constexpr uint32_t kPayload = 8192, kWire = kPayload + 64;
  const cc::Algorithm* rttcc = cc::find("rttcc");
  cc::Options o;
  cc::use_software_timestamps(&o, 50'000);
  const cc::PathInfo info{100e9, kPayload};
  Pacer flow;
  flow.start(*rttcc, o, info, 0, 2.0 * kWire, 10'000);
  pc.use_path_cc(rttcc, o, info, 2.0 * kWire, 10'000);
  LinkRun r;
  r.share.sent.assign(l.gbps.size(), 0);
  r.worst_rtt_us.assign(l.gbps.size(), 0);
  std::vector<double> free_at(l.gbps.size(), 0);  // ns each link is busy until
  std::multimap<uint64_t, std::pair<uint32_t, uint64_t>> acks;  // at (ns) -> (psn, sent at)
  std::set<uint32_t> got;
  uint32_t next = 0, ack = 0;
  uint64_t delivered = 0;
  for (uint64_t now = 0; now < run_us * 1000; now += 250) {
    while (next - ack < window && flow.allows(now, static_cast<uint64_t>(next - ack) * kPayload)) {
      const uint32_t p = pc.choose(next, now, kWire, kPayload);
      flow.sent(kWire, kPayload, now);
      ++r.share.sent[p];
      ++r.share.total;
      free_at[p] = std::max(free_at[p], static_cast<double>(now)) + kWire * 8 / l.gbps[p];
      acks.emplace(static_cast<uint64_t>(free_at[p]) + l.base_us * 1000, std::make_pair(next, now));
      ++next;
    }
    while (!acks.empty() && acks.begin()->first <= now) {
      auto [psn, sent_at] = acks.begin()->second;
      acks.erase(acks.begin());
      got.insert(psn);
      while (got.count(ack) != 0) got.erase(ack++);
      pc.rtt_sample(psn, now - sent_at, now, 0);
      pc.acked(ack);
      flow.set_decision(pc.rate());
      if (now > run_us * 500) {
        ++delivered;
        for (uint32_t q = 0; q < l.gbps.size(); ++q)
          if (pc.srtt_ns(q) != 0) r.worst_rtt_us[q] = std::max(r.worst_rtt_us[q], pc.srtt_ns(q) / 1000);
      }
    }
  }
  r.goodput_gbps = static_cast<double>(delivered) * kPayload * 8 / (static_cast<double>(run_us) * 500);
  return r;
}

TEST(PathChooser, AControllerPerPathPacesASmallLinkAloneAndTheFlowAtTheSum) {
  // Four paths, one of them a tenth of the others' link: 31 Gbit/s in all.
  const Links l{{10, 10, 1, 10}, 20};
  PathChooser pc;
  pc.reset(4, false, 4096, 5);
  const LinkRun r = paced_spray(pc, l, 100'000, 1024);
  std::fprintf(stderr,
               "per-path rttcc: %.1f Gbit/s (sum of links 31), path 2 (1 Gbit/s) %.3f of the packets, rates %.2f %.2f "
               "%.2f %.2f Gbit/s; worst smoothed RTT per path %llu %llu %llu %llu us\n",
               r.goodput_gbps, r.share.of(2), pc.path_rate_bps(0) / 1e9, pc.path_rate_bps(1) / 1e9,
               pc.path_rate_bps(2) / 1e9, pc.path_rate_bps(3) / 1e9,
               static_cast<unsigned long long>(r.worst_rtt_us[0]), static_cast<unsigned long long>(r.worst_rtt_us[1]),
               static_cast<unsigned long long>(r.worst_rtt_us[2]), static_cast<unsigned long long>(r.worst_rtt_us[3]));
  // Round robin would give the small link a quarter of the packets, 7.75
  // Gbit/s into 1: its queue would grow without bound, and the flow would
  // move at 4 x the small link.
  EXPECT_LT(r.share.of(2), 0.08);
  EXPECT_GT(r.goodput_gbps, 0.7 * 31);
  EXPECT_LT(pc.path_rate_bps(2), 0.3 * pc.path_rate_bps(0));
  for (uint32_t q = 0; q < 4; ++q) EXPECT_LT(r.worst_rtt_us[q], 1000u) << "path " << q << ": a queue stood";
}

// Four round-robin paths, each with its own RTTCC (software timestamps),
// 8 KiB packets at up to 100 Gbit/s.
void four_paths_with_rttcc(PathChooser& pc) {
  cc::Options o;
  cc::use_software_timestamps(&o, 50'000);
  pc.reset(4, false, 1024, 5);
  pc.use_path_cc(cc::find("rttcc"), o, cc::PathInfo{100e9, 8192}, 2.0 * 8256, 10'000);
}

// Round robin with a controller per path, where the RTTs carry more host
// delay than a queue adds, so no controller cuts (on the routed test fabric,
// in the VM's slow phase, every path's RTT was 0.3-0.8 ms): a path whose RTT
// floor stands far above the others' is marked slow and skipped while another
// path has room, so the flow does not keep feeding the link behind it; one
// packet in 256 still goes there, and once those come back fast the path is
// used again.
TEST(PathChooser, AControllerPerPathSkipsASlowPathAndComesBackToItOnceFast) {
  PathChooser pc;
  four_paths_with_rttcc(pc);
  // One packet every 2 us (33 Gbit/s), acknowledged at once: every path has
  // room. `rtt_us` per path.
  uint32_t psn = 0;
  auto run = [&](const std::vector<uint64_t>& rtt_us, uint32_t packets) {
    std::vector<uint64_t> sent(4, 0);
    for (uint32_t i = 0; i < packets; ++i, ++psn) {
      const uint64_t now = 2000ull * psn;
      const uint32_t p = pc.choose(psn, now, 8256, 8192);
      ++sent[p];
      pc.rtt_sample(psn, rtt_us[p] * 1000, now + rtt_us[p] * 1000, 0);
      pc.acked(psn + 1);
    }
    return sent;
  };
  const std::vector<uint64_t> sent = run({300, 300, 900, 300}, 20'000);
  std::fprintf(stderr, "path 2 behind a queue: %llu of 20000 packets, %llu reprobes\n",
               static_cast<unsigned long long>(sent[2]), static_cast<unsigned long long>(pc.reprobes()));
  EXPECT_GT(pc.slow_marks(2), 0u);
  EXPECT_LT(sent[2], 20'000u / 25) << "round robin alone gives it a quarter";
  EXPECT_GT(sent[2], 20'000u / 512) << "reprobed";
  for (uint32_t p : {0u, 1u, 3u}) EXPECT_EQ(pc.slow_marks(p), 0u) << p;
  const std::vector<uint64_t> back = run({300, 300, 300, 300}, 20'000);
  std::fprintf(stderr, "path 2 fast again: %llu of 20000 packets\n", static_cast<unsigned long long>(back[2]));
  EXPECT_GT(back[2], 20'000u / 5);
}

// The bookkeeping behind the paths' windows: a packet declared lost keeps
// counting on the path that carried it (it may only be waiting in a slow
// queue) until the cumulative ACK covers it, and a second copy declared lost
// stops counting.
TEST(PathChooser, ALostCopyCountsOnItsPathUntilTheAckCoversIt) {
  PathChooser pc;
  four_paths_with_rttcc(pc);
  for (uint32_t psn = 0; psn < 4; ++psn) EXPECT_EQ(pc.choose(psn, 1000, 8256, 8192), psn);
  for (uint32_t p = 0; p < 4; ++p) EXPECT_EQ(pc.in_flight(p), 1u) << p;
  const uint32_t again = pc.choose(2, 2000, 8256, 8192);  // psn 2 resent: its first copy stays on path 2
  EXPECT_NE(again, 2u) << "round robin moves on";
  EXPECT_EQ(pc.in_flight(2), 1u);
  EXPECT_EQ(pc.in_flight(again), 2u);
  const uint32_t third = pc.choose(2, 3000, 8256, 8192);  // the second copy lost too: it stops counting
  EXPECT_EQ(pc.in_flight(again), 1u);
  EXPECT_EQ(pc.in_flight(2), third == 2 ? 2u : 1u);
  pc.acked(4);  // every psn arrived: nothing in flight anywhere
  for (uint32_t p = 0; p < 4; ++p) EXPECT_EQ(pc.in_flight(p), 0u) << p;
}

}  // namespace
}  // namespace grex::dpdk
