// SPDX-License-Identifier: Apache-2.0
// verbs congestion control: a token bucket at the controller's rate gates
// posted bytes; RTT samples come from signalled zero-length RDMA WRITEs.
#include <algorithm>

#include "core/clock.h"
#include "drivers/verbs/verbs_device.h"

namespace grex::verbs {

double VerbsEndpoint::line_rate_bps() const noexcept {
  const uint64_t mbps = dev_->capabilities().link_speed_mbps;
  return mbps > 0 ? static_cast<double>(mbps) * 1e6 : 100e9;
}

bool VerbsEndpoint::pace_allows(uint64_t now_ns) noexcept {
  const cc::Algorithm* algo = dev_->vopts().cc;
  if (algo == nullptr) return true;
  const double mtu = path_mtu_ > 0 ? path_mtu_ : 4096;
  if (!cc_.active()) {  // starts with the first paced post
    cc::Options o;
    cc::use_software_timestamps(&o, dev_->vopts().cc_target_us * 1000);  // the probe's time includes CQ polling
    cc_.reset(*algo, o, cc::PathInfo{line_rate_bps(), static_cast<uint32_t>(mtu)}, now_ns);
    bucket_.reset(now_ns, 2.0 * mtu);
  }
  const cc::Decision d = cc_->decision();
  cc_stats_.rate_bps = d.rate_bps;
  bool ok = bucket_.allows(now_ns, d.rate_bps, 2.0 * mtu, 10'000);
  if (ok && d.window_bytes > 0) ok = sq_bytes_ < d.window_bytes;
  if (!ok) ++cc_stats_.paced_waits;
  return ok;
}

void VerbsEndpoint::paced(uint64_t bytes, uint64_t now_ns) noexcept {
  sq_bytes_ += bytes;
  if (!cc_.active()) return;
  bucket_.take(static_cast<double>(bytes));
  cc_->on_bytes_sent(now_ns, bytes);
  if (algo_wants_probes() && probes_.on_send(now_ns)) probe_due_ = true;
}

void VerbsEndpoint::on_probe_done(uint64_t now_ns) noexcept {
  probe_sq_ = 0;
  if (!cc_.active() || !probes_.on_reply(probe_seq_)) return;
  // The probe completes after everything posted before it: take away the
  // time those bytes need at line rate (as TIMELY does for its segments).
  const double ahead_ns = static_cast<double>(probe_ahead_bytes_) * 8e9 / line_rate_bps();
  const double rtt = std::max(1000.0, static_cast<double>(now_ns - probe_post_ns_) - ahead_ns);
  cc_stats_.last_rtt_ns = static_cast<uint64_t>(rtt);
  ++cc_stats_.rtt_samples;
  cc_->on_rtt_sample({now_ns, static_cast<uint64_t>(rtt), -1});
}

}  // namespace grex::verbs
