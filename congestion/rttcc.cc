// SPDX-License-Identifier: Apache-2.0
// RTTCC: rate control from timing-probe RTT samples, one update per sample.
// Two parameter sets (docs/congestion.md has each rule and its source):
//
// template (DOCA PCC rtt_template, per sample, in this order):
//   NACK seen and rtt >= max delay     rate *= 1 - 5u    (x0.5)
//   CNP seen or rtt >= max delay       rate *= 1 - 2u    (x0.8)
//   rtt > base RTT                     rate *= 1 - u     (x0.9)
//   otherwise                          rate += AI        (5 % of line rate)
//   with u = update factor 0.1, doubled when the port is more than 85 %
//   utilised; the rate stays within [min rate, line rate].
//
// ztr (grex's default, after NVIDIA's ZTR-CC description); the target is
// 1.25 x the smallest RTT seen, within [target, max delay / 2], so a path
// slower than 13 us unloaded is not read as congested forever:
//   rtt <= target: rate += AI (small); after each hyper-increase period
//     without congestion also + k HAI for the k-th such period in a row
//     (hyper-increase, escalating as DCQCN's);
//   rtt > target for the first time in the flow's life: rate *=
//     first_congestion_factor (x0.5), like leaving slow start (x0.8 when
//     it cuts from what the flow sent, below);
//   rtt > target but below 0.98 x the previous sample's RTT: hold (the
//     queue is draining; the cuts that drain it have not all shown yet);
//     for a flow whose samples are >= 4 RTTs apart, a falling RTT that
//     would reach the target by the next sample at the same pace counts
//     as rtt <= target;
//   rtt > target otherwise, at most once per RTT:
//     rate *= 1 - gain (rtt - target) / max(rtt, time since the previous
//     sample) (gain 0.25), bounded below by min_change;
//   rtt > max delay, or a NACK: the same proportional cut with the severe
//     gain (0.25, so at most x0.75; 0.5 on the drivers, which do not cut
//     from the sent rate) and without the min_change bound.
//   slow start (before all of the above): a new flow keeps one packet in
//     flight and doubles that window per calm sample; at the first
//     congested sample the rate becomes what the window delivered x 0.8;
//     after it, bytes in flight stay within 2 targets' worth of the rate
//     (at least one packet);
//   rare samplers (samples >= 4 RTTs apart) past their first congestion,
//   with this RTT and the previous one within the max delay, take one
//   linear rule instead of the cut, the hold and the projection:
//     rate *= 1 - g ((rtt - aim) + (rtt - prev rtt)) / interval, within
//     [min_change, max_change], aim = target + 0.014 x interval (g 1; off
//     on the drivers), plus the usual increase after 5 increases in a row;
//   Every increase is bounded above by max_change (x1.06) per update or
//   + k x 0.6e-6 of line rate per ms since the previous sample for the
//   k-th calm sample in a row, whichever is larger (the second lets a flow
//   that samples once per several ms climb, additively, so fairly).
//
// Both decrease from the rate the flow actually sent when that is lower
// than its allowed rate (a flow limited by its NIC share or by the
// application would otherwise cut an allowance it never used).
#include <algorithm>
#include <cmath>

#include "congestion/algorithms.h"

namespace grex::cc {
namespace {

class Rttcc final : public Controller {
 public:
  Rttcc(const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept
      : p_(opts.rttcc),
        line_bps_(path.line_rate_bps),
        min_bps_(path.line_rate_bps * opts.rttcc.min_rate_fraction),
        rate_bps_(std::clamp(path.line_rate_bps * opts.rttcc.start_rate_fraction, min_bps_, path.line_rate_bps)),
        template_(opts.rttcc.set == RttccSet::kTemplate),
        mtu_bytes_(path.mtu_bytes > 0 ? path.mtu_bytes : 4096),
        cwnd_bytes_(template_ || opts.rttcc.start_past_congestion
                        ? 0.0
                        : std::max(0.0, opts.rttcc.start_window_packets) * mtu_bytes_),
        congested_(opts.rttcc.start_past_congestion),
        last_calm_ns_(now_ns),
        last_hyper_ns_(now_ns),
        window_start_ns_(now_ns) {}

  void on_rtt_sample(const RttSample& sample) noexcept override {
    // A late sample that the hosts' gaps alone may have made late says
    // nothing certain about the path: the controller waits for the next one
    // (its state, the pending NACK and CNP included, stays as it was). A
    // host that stopped reading while it computed is not a queue to cut for.
    if (sample.hops > 0) hops_ = std::min(sample.hops, kMaxSampleHops);
    const uint64_t target = template_ ? p_.target_delay_ns : ztr_target();
    const uint64_t gap = std::min(sample.host_gap_ns, sample.rtt_ns);
    if (sample.rtt_ns > target && sample.rtt_ns - gap <= target) return;
    // Past the gaps, the controller acts on what they cannot explain: the
    // RTT less the gaps (a 10 ms preemption and 0.5 ms of queue call for
    // the cut of 0.5 ms of queue; cut for the whole RTT, a preempted
    // sender came down to its floor and stayed there).
    RttSample s = sample;
    if (s.rtt_ns > target) s.rtt_ns -= gap;
    const uint64_t since_ns = s.now_ns > window_start_ns_ ? s.now_ns - window_start_ns_ : 0;  // previous sample
    const double sent_bps = sent_rate_bps(s.now_ns);
    if (template_)
      template_update(s, sent_bps);
    else
      ztr_update(s, sent_bps, since_ns);
    rate_bps_ = std::clamp(rate_bps_, min_bps_, line_bps_);
    was_cnp_ = was_nack_ = nack_pending_ = false;
    timeouts_pending_ = 0;
  }

  void on_cnp(uint64_t) noexcept override { was_cnp_ = true; }
  void on_nack(uint64_t) noexcept override { was_nack_ = nack_pending_ = true; }
  // A retransmission timeout counts as a NACK at the next sample (as DOCA's
  // template folds NACKs into its next update): on a software path an RTO is
  // often a late ACK, not a loss, and must not halve the rate by itself.
  void on_timeout(uint64_t) noexcept override {
    was_nack_ = true;
    ++timeouts_pending_;
  }
  // Forgotten only while no real NACK is pending beside it.
  void on_spurious_timeout(uint64_t) noexcept override {
    if (timeouts_pending_ == 0) return;
    if (--timeouts_pending_ == 0 && !nack_pending_) was_nack_ = false;
  }
  void on_bytes_sent(uint64_t, uint64_t bytes) noexcept override { window_bytes_ += bytes; }
  Decision decision() const noexcept override {
    if (cwnd_bytes_ > 0) return {rate_bps_, static_cast<uint64_t>(cwnd_bytes_)};
    if (template_ || !(p_.window_targets > 0) || target_ns_ == 0) return {rate_bps_, 0};
    const double w = p_.window_targets * rate_bps_ / 8e9 * static_cast<double>(target_ns_);
    return {rate_bps_, static_cast<uint64_t>(std::max<double>(w, mtu_bytes_))};
  }

 private:
  // What the flow really sent since the previous sample (its rate if that
  // is not known yet), so a decrease starts from actual use.
  double sent_rate_bps(uint64_t now_ns) noexcept {
    double r = rate_bps_;
    if (now_ns > window_start_ns_ && window_bytes_ > 0)
      r = static_cast<double>(window_bytes_) * 8e9 / static_cast<double>(now_ns - window_start_ns_);
    window_start_ns_ = now_ns;
    window_bytes_ = 0;
    return r;
  }
  // A flow clearly held back (by its NIC share, by the application) cuts
  // from what it sent; otherwise from its rate (the measured rate of a few
  // packets per RTT is too coarse to cut from).
  double base_for_decrease(double sent_bps) const noexcept {
    return p_.cut_from_sent_rate && sent_bps < 0.5 * rate_bps_ ? std::max(sent_bps, min_bps_) : rate_bps_;
  }

  void template_update(const RttSample& s, double sent_bps) noexcept {
    const double u = p_.update_factor * (s.port_utilization > p_.high_utilization ? 2.0 : 1.0);
    if (was_nack_ && s.rtt_ns >= p_.max_delay_ns)
      rate_bps_ = base_for_decrease(sent_bps) * std::max(0.0, 1 - 5 * u);
    else if (was_cnp_ || s.rtt_ns >= p_.max_delay_ns)
      rate_bps_ = base_for_decrease(sent_bps) * std::max(0.0, 1 - 2 * u);
    else if (s.rtt_ns > p_.target_delay_ns)
      rate_bps_ = base_for_decrease(sent_bps) * std::max(0.0, 1 - u);
    else
      rate_bps_ += p_.ai_fraction * line_bps_;
  }

  void ztr_update(const RttSample& s, double sent_bps, uint64_t since_ns) noexcept {
    const uint64_t now = s.now_ns;
    const uint64_t prev_rtt_ns = prev_rtt_ns_;
    prev_rtt_ns_ = s.rtt_ns;
    if (min_rtt_ns_ == 0 || s.rtt_ns < min_rtt_ns_) min_rtt_ns_ = s.rtt_ns;
    const uint64_t target = ztr_target();
    target_ns_ = target;
    bool congested = s.rtt_ns > target || was_cnp_ || was_nack_;
    if (cwnd_bytes_ > 0) {
      slow_start(s, congested, since_ns);
      return;
    }
    const bool rare = p_.rare_sample_rtts > 0 &&
                      static_cast<double>(since_ns) >= p_.rare_sample_rtts * static_cast<double>(s.rtt_ns);
    if (rare && p_.linear_gain > 0 && congested_ && !was_cnp_ && !was_nack_ && prev_rtt_ns > 0 &&
        s.rtt_ns <= p_.max_delay_ns && prev_rtt_ns <= p_.max_delay_ns) {
      linear_update(s, sent_bps, since_ns, prev_rtt_ns, target);
      return;
    }
    // A rare sampler (a packet per several ms) learns of an emptied queue an
    // interval late: if the RTT, falling as fast as since the previous
    // sample, would reach the target by the next one, the flow grows now.
    // (rtt - (prev - rtt) <= target.)
    if (congested && !was_cnp_ && !was_nack_ && rare && s.rtt_ns < prev_rtt_ns && 2 * s.rtt_ns <= target + prev_rtt_ns)
      congested = false;
    if (!congested) {
      rate_bps_ = calm_increase(now, since_ns);
      return;
    }
    end_calm_run(now);
    const double base = base_for_decrease(sent_bps);
    if (!congested_) {  // first congestion: halve at once (from the allowance)
      congested_ = true;
      rate_bps_ = base * (base < rate_bps_ ? p_.first_cut_from_sent_factor : p_.first_congestion_factor);
      last_decrease_ns_ = now;
      return;
    }
    // Draining: the RTT fell since the previous sample, so the rate is
    // already below what the queue drains at. Cutting again on the queue
    // that is left would take the flow below its share (at 16 k flows the
    // start-up queue takes ms to drain, and every flow samples in that time).
    if (!was_nack_ && p_.hold_ratio > 0 &&
        static_cast<double>(s.rtt_ns) < p_.hold_ratio * static_cast<double>(prev_rtt_ns))
      return;
    const bool severe = s.rtt_ns > p_.max_delay_ns || was_nack_;
    // At most once per RTT: the effect of a cut shows an RTT later.
    if (now - last_decrease_ns_ < s.rtt_ns) return;
    // The excess delay over the time the cut has to act: an RTT for a flow
    // that samples every RTT, its sample interval for one that samples less
    // often (all flows on the queue cut within that interval).
    const double rtt = static_cast<double>(std::max<uint64_t>(s.rtt_ns, 1));
    const double over = std::max(rtt, static_cast<double>(since_ns));
    const double excess = s.rtt_ns > target ? (rtt - static_cast<double>(target)) / over : 0.0;
    // A gentle gain (0.25): larger gains past the max delay cut deeper
    // during a start-up queue and cost more goodput than they saved where a
    // flow cuts from what it sent (grex-ccsim, docs/congestion.md). Without
    // that rule (the drivers) a flow comes down from line rate by these cuts
    // alone, once per RTT, and a queue of milliseconds makes that slow: the
    // severe gain is 0.5 there (x0.5 per RTT at most, Swift's max_mdf).
    double factor = 1 - (severe ? p_.severe_decrease_gain : p_.decrease_gain) * excess;
    // Near the target the step is bounded by min_change; past the max delay
    // (or on a loss) by the first-congestion factor, as Swift bounds its
    // multiplicative decrease by max_mdf.
    const double floor = severe ? p_.first_congestion_factor : p_.min_change;
    factor = std::clamp(factor, floor, 1.0);
    rate_bps_ = base * factor;
    last_decrease_ns_ = now;
  }

  // The ztr target: 1.25 x the smallest RTT seen, within [target, max delay /
  // 2] (capped at the max delay: the first samples of a flow that starts
  // into a full queue must still read as congested), plus a hop target for
  // each switch hop past the first (hop_target_ns), plus flow scaling (as
  // Swift's): a flow far below line rate tolerates more delay, so among
  // flows sharing a queue the slower ones keep increasing while the faster
  // ones cut: fairness that does not depend on how often each flow samples.
  uint64_t ztr_target() const noexcept {
    uint64_t target = std::clamp<uint64_t>(
        static_cast<uint64_t>(p_.min_rtt_target_factor * static_cast<double>(min_rtt_ns_)), p_.target_delay_ns,
        std::max(p_.target_delay_ns, p_.max_delay_ns / 2));
    target += (hops_ - 1) * p_.hop_target_ns;
    if (p_.fs_range_ns > 0) {
      const double f = std::max(rate_bps_ / line_bps_, 1e-9);
      const double a = p_.fs_range_ns / (1 / std::sqrt(p_.fs_min_fraction) - 1);
      target += static_cast<uint64_t>(std::clamp(a / std::sqrt(f) - a, 0.0, p_.fs_range_ns));
    }
    return target;
  }

  // A congested sample ends the runs the increases escalate with.
  void end_calm_run(uint64_t now) noexcept {
    calm_run_ = 0;
    hyper_steps_ = 0;
    last_calm_ns_ = now;
  }

  // The increase of a calm sample: AI, the hyper-increase after each calm
  // period, within max_change or the time term, whichever allows more.
  double calm_increase(uint64_t now, uint64_t since_ns) noexcept {
    double next = rate_bps_ + p_.ai_fraction * line_bps_;
    if (now - last_calm_ns_ >= p_.hyper_increase_period_ns && now - last_hyper_ns_ >= p_.hyper_increase_period_ns) {
      // Hyper-increase: the k-th consecutive calm period adds k steps, so
      // a flow near its share probes gently and one far below climbs fast.
      ++hyper_steps_;
      next += hyper_steps_ * p_.hai_fraction * line_bps_;
      last_hyper_ns_ = now;
    }
    // The time term grows with the run of calm samples (the k-th calm
    // period in a row allows k times it): a rare sampler near its share
    // creeps up, so the queue its 16 k peers build between samples stays
    // short, while one that keeps finding the queue empty (after a drain)
    // climbs back within a few samples.
    const double calm_run = std::max<double>(1, hyper_steps_);
    const double cap = std::max(rate_bps_ * p_.max_change,
                                rate_bps_ + calm_run * p_.time_increase_fraction_per_ms * line_bps_ *
                                                static_cast<double>(since_ns) / 1e6);
    return std::min(next, cap);
  }

  void linear_update(const RttSample& s, double sent_bps, uint64_t since_ns, uint64_t prev_rtt_ns,
                     uint64_t target) noexcept {
    const uint64_t now = s.now_ns;
    const double rtt = static_cast<double>(s.rtt_ns);
    const double aim = static_cast<double>(target) + p_.linear_aim_interval_fraction * static_cast<double>(since_ns);
    const double err = (rtt - aim) + (rtt - static_cast<double>(prev_rtt_ns));
    const double f = 1 - p_.linear_gain * err / static_cast<double>(std::max<uint64_t>(since_ns, 1));
    if (f < 1) {
      end_calm_run(now);
      last_decrease_ns_ = now;
      rate_bps_ = base_for_decrease(sent_bps) * std::max(f, p_.min_change);
      return;
    }
    ++calm_run_;
    double next = rate_bps_ * std::min(f, p_.max_change);
    if (calm_run_ >= p_.linear_calm_run || s.rtt_ns <= p_.target_delay_ns)
      next = std::max(next, calm_increase(now, since_ns));
    rate_bps_ = next;
  }

  // Slow start: the window doubles per calm sample. At the first congested
  // one, what the window delivered over the sample's interval (the RTT, or
  // longer when the packet waited at the host, under PFC) is the flow's
  // share of the path as it found it; the rate starts just below that.
  // Starting at line rate instead, a flow sends at it until its first
  // sample returns: three such senders filled a 5 Gbit/s bottleneck's 4 MB
  // queue before they learned of it (docs/congestion.md).
  void slow_start(const RttSample& s, bool congested, uint64_t since_ns) noexcept {
    const uint64_t now = s.now_ns;
    if (!congested) {
      cwnd_bytes_ *= 2;
      // A window past line rate x max delay no longer limits anything.
      if (cwnd_bytes_ * 8e9 >= line_bps_ * static_cast<double>(p_.max_delay_ns)) cwnd_bytes_ = 0;
      return;
    }
    if (p_.cut_from_sent_rate || s.rtt_ns <= p_.max_delay_ns) {
      // Backlogged flows (cut_from_sent_rate) deliver over the whole
      // interval: a packet that waited at its host (under PFC) took that
      // long too. On/off traffic (the drivers) over the RTT alone, since the
      // flow may have had nothing to send for much of the interval.
      const uint64_t over_ns = std::max<uint64_t>({s.rtt_ns, p_.cut_from_sent_rate ? since_ns : 0, 1});
      rate_bps_ = std::min(rate_bps_, cwnd_bytes_ * 8e9 / static_cast<double>(over_ns)) * p_.first_cut_from_sent_factor;
    } else {
      // Software timestamps past the max delay this early are as likely the
      // hosts' scheduling as a queue (more busy-polling ranks than cores
      // read milliseconds): the usual first cut, not one from a window of
      // a packet or two.
      rate_bps_ *= p_.first_congestion_factor;
    }
    cwnd_bytes_ = 0;
    congested_ = true;
    end_calm_run(now);
    last_decrease_ns_ = now;
  }

  RttccParams p_;
  double line_bps_;
  double min_bps_;
  double rate_bps_;
  bool template_;
  uint32_t mtu_bytes_;
  double cwnd_bytes_;  // ztr slow start's window; 0 once it is over
  bool was_cnp_ = false;
  bool was_nack_ = false;     // a NACK or a timeout since the previous sample
  bool nack_pending_ = false;  // a NACK (not a timeout) since the previous sample
  uint32_t timeouts_pending_ = 0;  // timeouts since the previous sample, not found spurious
  bool congested_;  // ztr: the flow has met congestion (its first one halves)
  uint32_t hyper_steps_ = 0;  // consecutive hyper-increase periods
  uint32_t calm_run_ = 0;     // linear rule: samples in a row that called for an increase
  uint64_t min_rtt_ns_ = 0;  // ztr: the smallest RTT seen (the path's unloaded RTT, at best)
  uint64_t prev_rtt_ns_ = 0;  // ztr: the previous sample's RTT
  uint64_t target_ns_ = 0;    // ztr: the target of the latest sample (0: none yet)
  uint32_t hops_ = 1;         // switch hops of the latest sample that knew them
  uint64_t last_calm_ns_;
  uint64_t last_hyper_ns_;
  uint64_t last_decrease_ns_ = 0;
  uint64_t window_start_ns_;
  uint64_t window_bytes_ = 0;
};

}  // namespace

namespace detail {
Controller* construct_rttcc(void* storage, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept {
  return construct_in<Rttcc>(storage, opts, path, now_ns);
}
}  // namespace detail

}  // namespace grex::cc
