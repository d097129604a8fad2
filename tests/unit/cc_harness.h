// SPDX-License-Identifier: Apache-2.0
// What the congestion-controller tests share: a flow on a 100 Gbit/s path
// with 4 KiB packets, fed RTT samples by hand.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "congestion/cc.h"

namespace grex::cc {
namespace {

constexpr double kLine = 100e9;
constexpr uint64_t kUs = 1000;

struct Harness {
  Flow flow;
  explicit Harness(const char* name, Options o = {}, uint64_t now = 0) {
    const Algorithm* a = find(name);
    EXPECT_NE(a, nullptr) << name;
    if (a != nullptr) flow.reset(*a, o, PathInfo{kLine, 4096}, now);
  }
  double rate() const { return flow->decision().rate_bps; }
  void rtt(uint64_t now, uint64_t rtt_ns, double util = -1) { flow->on_rtt_sample({now, rtt_ns, util}); }
};

// RTTCC's rules one at a time: no slow start (start_window_packets 0 starts a
// flow at its start rate), and rare samplers on the cut, hold and projection
// rules rather than the linear one.
inline Options rate_rules() {
  Options o;
  o.rttcc.start_window_packets = 0;
  o.rttcc.linear_gain = 0;
  return o;
}

// ... and without flow scaling: the exact steps against the plain 13 us target.
inline Options no_flow_scaling() {
  Options o = rate_rules();
  o.rttcc.fs_range_ns = 0;
  return o;
}

}  // namespace
}  // namespace grex::cc
