// SPDX-License-Identifier: Apache-2.0
// ccsim: measurement (samples, Jain windows, convergence) and the final metrics.
#include "congestion/sim/sim_internal.h"

namespace grex::ccsim::detail {

void Sim::on_sample() {
  Sample s;
  s.t_us = static_cast<double>(now_) / 1e3;
  s.queue_bytes = queue_bytes_;
  const uint64_t delivered = whole_.delivered_bytes;
  const double secs = static_cast<double>(sample_ns_) * 1e-9;
  s.goodput = static_cast<double>(delivered - last_sample_delivered_) * 8 / (secs * payload_rate_bps());
  last_sample_delivered_ = delivered;
  s.mean_rate_gbps = active_ > 0 ? static_cast<double>(rate_sum_) / active_ / 1e9 : 0;
  s.paused = paused_;
  bool any = false;
  for (uint32_t f : tracked_) {
    const FlowState& fs = flows_[f];
    if (fs.phase != FlowPhase::kActive) {
      s.tracked_gbps.push_back(-1);
      continue;
    }
    const double g = fs.rate_bps / 1e9;
    s.tracked_gbps.push_back(g);
    s.min_rate_gbps = any ? std::min(s.min_rate_gbps, g) : g;
    s.max_rate_gbps = any ? std::max(s.max_rate_gbps, g) : g;
    any = true;
  }
  series_.push_back(std::move(s));
  push(now_ + sample_ns_, Ev::kSample);
}

void Sim::on_jain_window() {
  const uint64_t begin = now_ - jain_window_ns_;
  double sum = 0, sum_sq = 0;
  uint32_t n = 0;
  for (uint32_t f = 0; f < n_; ++f) {
    FlowState& fs = flows_[f];
    if (fs.phase == FlowPhase::kActive && fs.start_ns <= begin) {
      const auto x = static_cast<double>(fs.delivered - fs.jain_mark);
      sum += x;
      sum_sq += x * x;
      ++n;
    }
    fs.jain_mark = fs.delivered;
  }
  jain_windows_.push_back(n == 0 ? 1.0 : jain_index(sum, sum_sq, n));
  push(now_ + jain_window_ns_, Ev::kJainWindow);
}

Metrics Sim::metrics(const Counters& c, uint64_t t0, uint64_t t1, bool window) const {
  Metrics m;
  m.seconds = static_cast<double>(t1 - t0) * 1e-9;
  if (m.seconds > 0) {
    const double bits = static_cast<double>(c.delivered_bytes) * 8;
    m.goodput_gbps = bits / m.seconds / 1e9;
    m.goodput_of_line_rate = bits / (m.seconds * rate_bps_);
    m.goodput = bits / (m.seconds * payload_rate_bps());
    m.link_utilization = static_cast<double>(c.egress_wire_bytes) * 8 / (m.seconds * rate_bps_);
    m.pfc_pause_fraction = static_cast<double>(c.pause_ns) * 1e-9 / m.seconds;
  }
  // Jain over the flows active throughout the interval.
  double sum = 0, sum_sq = 0;
  uint32_t n = 0;
  for (uint32_t f = 0; f < n_; ++f) {
    const FlowState& fs = flows_[f];
    if (fs.start_ns > t0 || fs.start_ns == kNever || fs.stop_ns < t1) continue;
    const auto x = static_cast<double>(window ? fs.delivered_window : fs.delivered);
    sum += x;
    sum_sq += x * x;
    ++n;
  }
  m.jain = jain_index(sum, sum_sq, n);
  m.jain_flows = n;
  m.queue_delay_us = c.queue_delay_ns.summary(1e-3);
  m.queue_kb = c.queue_bytes.summary(1e-3);
  m.rtt_us = c.rtt_ns.summary(1e-3);
  m.data_packets = c.data_packets;
  m.retransmits = c.retransmits;
  m.probes = c.probes;
  m.drops = c.drops;
  m.probe_drops = c.probe_drops;
  m.cnps = c.cnps;
  m.nacks = c.nacks;
  m.ecn_marks = c.marks;
  m.stale_probe_replies = c.stale;
  m.probe_overhead =
      c.data_wire_bytes > 0 ? static_cast<double>(c.probe_wire_bytes) / static_cast<double>(c.data_wire_bytes) : 0;
  m.pfc_pauses = c.pauses;
  return m;
}

void Sim::finish(Result* r) {
  r->window = metrics(window_, warmup_ns_, end_ns_, true);
  r->whole = metrics(whole_, 0, end_ns_, false);
  r->warmup_ms = static_cast<double>(warmup_ns_) / 1e6;
  r->hosts = h_;
  r->idle_probe_rtt_us = idle_rtt_ns_ / 1e3;
  r->rttcc_target_us = static_cast<double>(opts_.rttcc.target_delay_ns) / 1e3;
  r->cnp_interval_us = algo_.wants_cnp ? static_cast<double>(cnp_interval_ns_) / 1e3 : -1;
  r->pfc_xoff_bytes = cfg_.lossy ? 0 : xoff_;
  r->pfc_xon_bytes = cfg_.lossy ? 0 : xon_;
  r->max_queue_bytes = max_queue_;
  r->buffer_overflows = overflows_;
  r->bursts_started = bursts_started_;
  r->bursts_completed = bursts_completed_;
  r->burst_completion_us = burst_completion_.summary(1e-3);
  r->tracked_flows = tracked_;
  r->series = std::move(series_);
  r->final_mean_rate_gbps = active_ > 0 ? static_cast<double>(rate_sum_) / active_ / 1e9 : 0;
  r->invalid_decisions = invalid_decisions_;
  // Convergence after each change of the flow set: the windows that lie
  // wholly between this change and the next; converged from the end of
  // the last window below the level (or the first window's start if none
  // was); not converged if the last one is below it.
  if (cfg_.scenario == Scenario::kJoinLeave) {
    const uint64_t w = jain_window_ns_;
    for (size_t i = 0; i < changes_.size(); ++i) {
      Convergence c = changes_[i];
      const auto te = static_cast<uint64_t>(std::llround(c.at_us * 1e3));
      const uint64_t tn =
          i + 1 < changes_.size() ? static_cast<uint64_t>(std::llround(changes_[i + 1].at_us * 1e3)) : end_ns_;
      const uint64_t k0 = (te + w - 1) / w;  // first window starting at or after te
      const uint64_t k1 = std::min<uint64_t>(tn / w, jain_windows_.size());  // windows [k0, k1) end by tn
      if (k0 >= k1) continue;                                                 // none fits: not measurable
      uint64_t settled = k0 * w;
      bool ok = true;
      for (uint64_t k = k0; k < k1; ++k) {
        if (jain_windows_[k] < cfg_.converged_jain) {
          settled = (k + 1) * w;
          ok = k + 1 < k1;
        }
      }
      c.time_us = ok ? static_cast<double>(settled - te) / 1e3 : -1;
      r->convergence.push_back(c);
    }
  }
}

}  // namespace grex::ccsim::detail
