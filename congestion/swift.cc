// SPDX-License-Identifier: Apache-2.0
// Swift: a congestion window steered by delay against a target that grows
// for flows with small windows (flow scaling). After Kumar et al., "Swift:
// Delay is Simple and Effective for Congestion Control in the Datacenter",
// SIGCOMM 2020, Algorithm 1, with RTT samples from timing probes:
//   target = base + hops * per_hop + clamp(a / sqrt(cwnd) + b, 0, fs_range)
//     with a, b chosen so the extra is fs_range at fs_min_cwnd and 0 at fs_max_cwnd
//   rtt < target   cwnd += ai * (time since the last sample / rtt), at most ai per sample
//   rtt >= target  at most once per RTT:
//                  cwnd *= max(1 - beta (rtt - target) / rtt, 1 - max_mdf)
//   NACK / timeout cwnd *= 1 - max_mdf (at most once per RTT)
// Below one packet of window the flow is paced: rate = cwnd * MTU / rtt.
#include <algorithm>
#include <cmath>

#include "congestion/algorithms.h"

namespace grex::cc {
namespace {

class Swift final : public Controller {
 public:
  Swift(const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept
      : p_(opts.swift), line_bps_(path.line_rate_bps), mtu_(path.mtu_bytes), srtt_ns_(static_cast<double>(opts.swift.base_rtt_ns)),
        last_sample_ns_(now_ns) {
    const double bdp = line_bps_ / 8 * static_cast<double>(p_.base_rtt_ns) * 1e-9 / mtu_;
    cwnd_ = std::clamp(p_.start_cwnd_packets > 0 ? p_.start_cwnd_packets : bdp, p_.min_cwnd_packets, p_.max_cwnd_packets);
    const double inv_min = 1 / std::sqrt(p_.fs_min_cwnd_packets), inv_max = 1 / std::sqrt(p_.fs_max_cwnd_packets);
    fs_a_ = p_.fs_range_ns / (inv_min - inv_max);
    fs_b_ = -fs_a_ * inv_max;
  }

  void on_rtt_sample(const RttSample& s) noexcept override {
    const double rtt = static_cast<double>(std::max<uint64_t>(s.rtt_ns, 1));
    srtt_ns_ = 0.875 * srtt_ns_ + 0.125 * rtt;
    if (s.hops > 0) hops_ = std::min(s.hops, kMaxSampleHops);
    const double target = static_cast<double>(p_.base_target_ns + hops_ * p_.hop_target_ns) +
                          std::clamp(fs_a_ / std::sqrt(cwnd_) + fs_b_, 0.0, p_.fs_range_ns);
    if (rtt < target) {
      const double share = std::min(1.0, static_cast<double>(s.now_ns - last_sample_ns_) / rtt);
      cwnd_ += cwnd_ >= 1 ? p_.ai_packets * share : p_.ai_packets * share * cwnd_;
    } else if (can_decrease(s.now_ns)) {
      cwnd_ *= std::max(1 - p_.beta * (rtt - target) / rtt, 1 - p_.max_mdf);
      last_decrease_ns_ = s.now_ns;
    }
    last_sample_ns_ = s.now_ns;
    cwnd_ = std::clamp(cwnd_, p_.min_cwnd_packets, p_.max_cwnd_packets);
  }

  void on_nack(uint64_t now_ns) noexcept override { loss(now_ns); }
  void on_timeout(uint64_t now_ns) noexcept override { loss(now_ns); }

  Decision decision() const noexcept override {
    // Window of whole packets; below one packet the pacer spreads one packet
    // over rtt / cwnd.
    const double rate = cwnd_ >= 1 ? line_bps_ : cwnd_ * mtu_ * 8e9 / srtt_ns_;
    return {std::min(rate, line_bps_), static_cast<uint64_t>(std::max(1.0, cwnd_) * mtu_)};
  }

 private:
  bool can_decrease(uint64_t now_ns) const noexcept {
    return !decreased_any() || static_cast<double>(now_ns - last_decrease_ns_) >= srtt_ns_;
  }
  bool decreased_any() const noexcept { return last_decrease_ns_ != kNever; }
  void loss(uint64_t now_ns) noexcept {
    if (!can_decrease(now_ns)) return;
    cwnd_ = std::max(p_.min_cwnd_packets, cwnd_ * (1 - p_.max_mdf));
    last_decrease_ns_ = now_ns;
  }

  static constexpr uint64_t kNever = ~uint64_t{0};
  SwiftParams p_;
  double line_bps_;
  double mtu_;
  double srtt_ns_;
  double cwnd_ = 1;
  uint32_t hops_ = 1;  // of the latest sample that knew them
  double fs_a_ = 0;
  double fs_b_ = 0;
  uint64_t last_sample_ns_;
  uint64_t last_decrease_ns_ = kNever;
};

}  // namespace

namespace detail {
Controller* construct_swift(void* storage, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept {
  return construct_in<Swift>(storage, opts, path, now_ns);
}
}  // namespace detail

}  // namespace grex::cc
