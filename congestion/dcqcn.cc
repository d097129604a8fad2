// SPDX-License-Identifier: Apache-2.0
// DCQCN reaction point (the sender's side; the notification point is
// CnpPacer in cc.h and the marking switch lives in the simulator or the
// fabric). After Zhu et al., "Congestion Control for Large-Scale RDMA
// Deployments", SIGCOMM 2015, Fig. 7, with the mlx5 firmware defaults:
//
//   on CNP (at most one cut per rate_reduce_period):
//     target = current; current *= max(1 - alpha/2, min_dec_fraction);
//     alpha = g alpha + (1 - g); the increase counters restart
//   every alpha_update_period without a CNP: alpha = g alpha
//   increase events: every rate_increase_period (timer) and every
//     byte_counter_bytes sent (byte counter); with T, B the events since the
//     last cut and F = fast_recovery_steps:
//       max(T, B) < F   fast recovery   current = (target + current) / 2
//       min(T, B) >= F  hyper increase  target += HAI; current = (target + current) / 2
//       otherwise       additive        target += AI;  current = (target + current) / 2
//
// Timers advance lazily: every callback first replays the periods that
// elapsed since the previous one (no clock reads).
#include <algorithm>
#include <cmath>

#include "congestion/algorithms.h"

namespace grex::cc {
namespace {

class Dcqcn final : public Controller {
 public:
  Dcqcn(const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept
      : p_(opts.dcqcn),
        line_bps_(path.line_rate_bps),
        current_bps_(path.line_rate_bps * std::clamp(opts.dcqcn.start_rate_fraction, 0.0, 1.0)),
        target_bps_(current_bps_),
        alpha_(opts.dcqcn.initial_alpha),
        last_alpha_ns_(now_ns),
        last_timer_ns_(now_ns) {
    current_bps_ = std::max(current_bps_, p_.min_rate_bps);
  }

  void on_cnp(uint64_t now_ns) noexcept override {
    advance(now_ns);
    if (cut_any_ && now_ns - last_cut_ns_ < p_.rate_reduce_period_ns) return;
    if (!cut_any_) alpha_ = p_.initial_alpha;  // alpha starts at the first CNP
    cut_any_ = true;
    last_cut_ns_ = now_ns;
    target_bps_ = current_bps_;
    current_bps_ = std::max(p_.min_rate_bps, current_bps_ * std::max(1 - alpha_ / 2, p_.min_dec_fraction));
    alpha_ = p_.alpha_keep * alpha_ + (1 - p_.alpha_keep);
    timer_events_ = byte_events_ = 0;
    bytes_ = 0;
    last_timer_ns_ = now_ns;
    last_alpha_ns_ = now_ns;
  }

  void on_bytes_sent(uint64_t now_ns, uint64_t bytes) noexcept override {
    advance(now_ns);
    bytes_ += bytes;
    while (bytes_ >= p_.byte_counter_bytes) {
      bytes_ -= p_.byte_counter_bytes;
      ++byte_events_;
      increase();
    }
  }

  void on_rtt_sample(const RttSample& s) noexcept override { advance(s.now_ns); }
  void on_timeout(uint64_t now_ns) noexcept override { advance(now_ns); }
  Decision decision() const noexcept override { return {current_bps_, 0}; }

 private:
  void advance(uint64_t now_ns) noexcept {
    if (now_ns > last_alpha_ns_ + p_.alpha_update_period_ns) {
      const uint64_t periods = (now_ns - last_alpha_ns_) / p_.alpha_update_period_ns;
      alpha_ *= std::pow(p_.alpha_keep, static_cast<double>(periods));
      last_alpha_ns_ += periods * p_.alpha_update_period_ns;
    }
    if (current_bps_ >= line_bps_ && target_bps_ >= line_bps_) {  // nothing to recover
      last_timer_ns_ = now_ns;
      return;
    }
    // Replay timer events (bounded: past a few hundred the rate is at line rate anyway).
    for (int i = 0; i < 512 && now_ns - last_timer_ns_ >= p_.rate_increase_period_ns; ++i) {
      last_timer_ns_ += p_.rate_increase_period_ns;
      ++timer_events_;
      increase();
    }
    if (now_ns - last_timer_ns_ >= p_.rate_increase_period_ns) last_timer_ns_ = now_ns;
  }

  void increase() noexcept {
    const uint32_t f = p_.fast_recovery_steps;
    if (std::max(timer_events_, byte_events_) < f) {
      // fast recovery: target unchanged
    } else if (std::min(timer_events_, byte_events_) >= f) {
      target_bps_ += p_.hai_rate_bps;
    } else {
      target_bps_ += p_.ai_rate_bps;
    }
    target_bps_ = std::min(target_bps_, line_bps_);
    current_bps_ = std::min(line_bps_, (target_bps_ + current_bps_) / 2);
  }

  DcqcnParams p_;
  double line_bps_;
  double current_bps_;
  double target_bps_;
  double alpha_;
  uint64_t last_alpha_ns_;
  uint64_t last_timer_ns_;
  uint64_t last_cut_ns_ = 0;
  uint64_t bytes_ = 0;
  uint32_t timer_events_ = 0;
  uint32_t byte_events_ = 0;
  bool cut_any_ = false;
};

}  // namespace

namespace detail {
Controller* construct_dcqcn(void* storage, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept {
  return construct_in<Dcqcn>(storage, opts, path, now_ns);
}
}  // namespace detail

}  // namespace grex::cc
