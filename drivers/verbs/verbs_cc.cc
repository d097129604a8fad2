// SPDX-License-Identifier: Apache-2.0
// verbs congestion control: a token bucket at the controller's rate gates
// posted bytes; RTT samples come from signalled zero-length RDMA WRITEs.
#include <algorithm>

#include "core/clock.h"
#include "drivers/verbs/verbs_device.h"

namespace grex::verbs {

bool VerbsEndpoint::pace_allows(uint64_t now_ns) noexcept {
  const cc::Algorithm* algo = dev_->vopts().cc;
  if (algo == nullptr) return true;
  const double line = dev_->capabilities().link_speed_mbps > 0 ? dev_->capabilities().link_speed_mbps * 1e6 : 100e9;
  if (!cc_.active()) {  // starts with the first paced post
    cc::Options o;
    o.rttcc.target_delay_ns = dev_->vopts().cc_target_us * 1000;
    o.rttcc.max_delay_ns = std::max<uint64_t>(o.rttcc.max_delay_ns, 4 * o.rttcc.target_delay_ns);
    o.rttcc.min_rtt_target_factor = 1.25;  // the probe's time includes our CQ polling
    o.rttcc.cut_from_sent_rate = false;    // collectives are on/off traffic
    cc_.reset(*algo, o, cc::PathInfo{line, path_mtu_ > 0 ? path_mtu_ : 4096}, now_ns);
    tokens_ns_ = now_ns;
    tokens_ = 2.0 * (path_mtu_ > 0 ? path_mtu_ : 4096);
  }
  const cc::Decision d = cc_->decision();
  cc_stats_.rate_bps = d.rate_bps;
  const double per_ns = d.rate_bps / 8e9;
  // A message goes whole (the NIC segments it); the bucket may go negative by
  // one message and then holds the next until it refills. At most 10 us of
  // tokens are saved while idle.
  const double cap = std::max(2.0 * 4096, per_ns * 10'000);
  if (now_ns > tokens_ns_) tokens_ = std::min(cap, tokens_ + per_ns * static_cast<double>(now_ns - tokens_ns_));
  tokens_ns_ = now_ns;
  bool ok = tokens_ > 0;
  if (ok && d.window_bytes > 0) ok = sq_bytes_ < d.window_bytes;
  if (!ok) ++cc_stats_.paced_waits;
  return ok;
}

void VerbsEndpoint::paced(uint64_t bytes, uint64_t now_ns) noexcept {
  sq_bytes_ += bytes;
  if (!cc_.active()) return;
  tokens_ -= static_cast<double>(bytes);
  cc_->on_bytes_sent(now_ns, bytes);
  if (algo_wants_probes() && probes_.on_send(now_ns)) probe_due_ = true;
}

void VerbsEndpoint::on_probe_done(uint64_t now_ns) noexcept {
  probe_sq_ = 0;
  if (!cc_.active() || !probes_.on_reply(probe_seq_)) return;
  const double line = dev_->capabilities().link_speed_mbps > 0 ? dev_->capabilities().link_speed_mbps * 1e6 : 100e9;
  // The probe completes after everything posted before it: take away the
  // time those bytes need at line rate (as TIMELY does for its segments).
  const double ahead_ns = static_cast<double>(probe_ahead_bytes_) * 8e9 / line;
  const double rtt = std::max(1000.0, static_cast<double>(now_ns - probe_post_ns_) - ahead_ns);
  cc_stats_.last_rtt_ns = static_cast<uint64_t>(rtt);
  ++cc_stats_.rtt_samples;
  cc_->on_rtt_sample({now_ns, static_cast<uint64_t>(rtt), -1});
}

}  // namespace grex::verbs
