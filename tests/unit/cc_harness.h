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

}  // namespace
}  // namespace grex::cc
