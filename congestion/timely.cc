// SPDX-License-Identifier: Apache-2.0
// TIMELY: rate control from the RTT gradient. After Mittal et al., "TIMELY:
// RTT-based Congestion Control for the Datacenter", SIGCOMM 2015, Algorithm 1
// (per RTT sample):
//   rtt_diff = (1 - w) rtt_diff + w (rtt - prev_rtt)
//   gradient = rtt_diff / min_rtt
//   rtt < T_low                 rate += delta
//   rtt > T_high                rate *= 1 - beta (1 - T_high / rtt)
//   gradient <= 0               rate += N delta after N such samples in a row (HAI), else delta
//   otherwise                   rate *= 1 - beta gradient
#include <algorithm>

#include "congestion/algorithms.h"

namespace grex::cc {
namespace {

class Timely final : public Controller {
 public:
  Timely(const Options& opts, const PathInfo& path, uint64_t) noexcept
      : p_(opts.timely),
        line_bps_(path.line_rate_bps),
        rate_bps_(std::max(opts.timely.min_rate_bps, path.line_rate_bps * opts.timely.start_rate_fraction)) {}

  void on_rtt_sample(const RttSample& s) noexcept override {
    const double rtt = static_cast<double>(s.rtt_ns);
    if (!have_prev_) {
      have_prev_ = true;
      prev_rtt_ = rtt;
      return;
    }
    rtt_diff_ = (1 - p_.ewma_weight) * rtt_diff_ + p_.ewma_weight * (rtt - prev_rtt_);
    prev_rtt_ = rtt;
    const double gradient = rtt_diff_ / static_cast<double>(p_.min_rtt_ns);
    if (s.rtt_ns < p_.t_low_ns) {
      rate_bps_ += p_.ai_rate_bps;
      negative_run_ = 0;
    } else if (s.rtt_ns > p_.t_high_ns) {
      rate_bps_ *= 1 - p_.beta * (1 - static_cast<double>(p_.t_high_ns) / rtt);
      negative_run_ = 0;
    } else if (gradient <= 0) {
      ++negative_run_;
      rate_bps_ += (negative_run_ >= p_.hai_after_samples ? p_.hai_after_samples : 1) * p_.ai_rate_bps;
    } else {
      rate_bps_ *= std::max(0.0, 1 - p_.beta * gradient);
      negative_run_ = 0;
    }
    rate_bps_ = std::clamp(rate_bps_, p_.min_rate_bps, line_bps_);
  }

  void on_nack(uint64_t) noexcept override { rate_bps_ = std::max(p_.min_rate_bps, rate_bps_ * (1 - p_.beta / 2)); }
  void on_timeout(uint64_t) noexcept override { rate_bps_ = std::max(p_.min_rate_bps, rate_bps_ * 0.5); }
  Decision decision() const noexcept override { return {rate_bps_, 0}; }

 private:
  TimelyParams p_;
  double line_bps_;
  double rate_bps_;
  double prev_rtt_ = 0;
  double rtt_diff_ = 0;
  uint32_t negative_run_ = 0;
  bool have_prev_ = false;
};

}  // namespace

namespace detail {
Controller* construct_timely(void* storage, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept {
  return construct_in<Timely>(storage, opts, path, now_ns);
}
}  // namespace detail

}  // namespace grex::cc
