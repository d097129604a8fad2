// SPDX-License-Identifier: Apache-2.0
// verbs congestion control: a token bucket at the controller's rate gates
// posted bytes, and where the NIC offers a per-QP rate limit for RC it spaces
// each message's packets at a level just above that rate; RTT samples come
// from signalled zero-length RDMA WRITEs.
#include <algorithm>
#include <cstring>
#include <string>

#include "core/clock.h"
#include "core/log.h"
#include "drivers/verbs/verbs_device.h"

namespace grex::verbs {

namespace {
// Setting a QP's rate is a firmware command: at most this often per QP. Not
// measured on a NIC yet; the software bucket keeps the average in between.
constexpr uint64_t kNicRateIntervalNs = 500'000;
}  // namespace

double VerbsEndpoint::line_rate_bps() const noexcept {
  const uint64_t mbps = dev_->capabilities().link_speed_mbps;
  return mbps > 0 ? static_cast<double>(mbps) * 1e6 : 100e9;
}

bool VerbsEndpoint::pace_allows(uint64_t now_ns) noexcept {
  const cc::Algorithm* algo = dev_->vopts().cc;
  if (algo == nullptr) return true;
  const double mtu = path_mtu_ > 0 ? path_mtu_ : 4096;
  if (!pacer_.active()) {  // starts with the first paced post
    cc::Options o;
    cc::use_software_timestamps(&o, dev_->vopts().cc_target_us * 1000);  // the probe's time includes CQ polling
    pacer_.start(*algo, o, cc::PathInfo{line_rate_bps(), static_cast<uint32_t>(mtu)}, now_ns, 2.0 * mtu, 10'000);
    const bool nic = dev_->vopts().rate_limit != VerbsOptions::RateLimit::kSoftware;
    nic_rate_.reset(nic ? dev_->rc_rate_limits() : cc::NicRateLimit::Range{}, line_rate_bps(), kNicRateIntervalNs);
  }
  const bool ok = pacer_.allows(now_ns, sq_bytes_);
  cc_stats_.rate_bps = pacer_.rate_bps();
  cc_stats_.paced_waits = pacer_.waits();
  if (nic_rate_.active()) set_nic_rate(pacer_.rate_bps(), now_ns);
  return ok;
}

void VerbsEndpoint::paced(uint64_t bytes, uint64_t now_ns) noexcept {
  sq_bytes_ += bytes;
  if (!pacer_.active()) return;
  pacer_.sent(bytes, bytes, now_ns);
  if (algo_wants_probes() && probes_.on_send(now_ns)) probe_due_ = true;
}

void VerbsEndpoint::set_nic_rate(double rate_bps, uint64_t now_ns) noexcept {
  const int64_t kbps = nic_rate_.next_kbps(rate_bps, now_ns);
  if (kbps < 0) return;
  ibv_qp_rate_limit_attr attr{};
  attr.rate_limit = static_cast<uint32_t>(kbps);  // 0: no limit; burst and packet size: the device's defaults
  const int rc = ibv_modify_qp_rate_limit(qp_, &attr);
  if (rc == 0) {
    nic_rate_.programmed(attr.rate_limit, now_ns);
  } else {
    nic_rate_.refused();
    ibv_qp_rate_limit_attr off{};  // a limit below the rate must not outlive the refusal
    if (nic_rate_.kbps() != 0 && ibv_modify_qp_rate_limit(qp_, &off) == 0) nic_rate_.programmed(0, now_ns);
    const std::string why = dev_->name() + " refused a rate limit of " + std::to_string(kbps) +
                            " kbit/s on the QP to rank " + std::to_string(peer()) + ": " + std::strerror(rc);
    if (dev_->vopts().rate_limit == VerbsOptions::RateLimit::kNic) {
      fail(Status::kLocalError, why + " (GREX_IB_RATE_LIMIT=nic)");
    } else {
      GREX_WARN("verbs", "%s; pacing in software alone", why.c_str());
    }
  }
}

void VerbsEndpoint::on_probe_done(uint64_t now_ns) noexcept {
  probe_sq_ = 0;
  if (!pacer_.active() || !probes_.on_reply(probe_seq_)) return;
  // The probe completes after everything posted before it: take away the
  // time those bytes need at the speed the NIC sends them, the line rate or
  // its per-QP limit (as TIMELY does for its segments).
  const double ahead_ns = static_cast<double>(probe_ahead_bytes_) * 8e9 / nic_rate_.send_bps();
  const double rtt = std::max(1000.0, static_cast<double>(now_ns - probe_post_ns_) - ahead_ns);
  cc_stats_.last_rtt_ns = static_cast<uint64_t>(rtt);
  ++cc_stats_.rtt_samples;
  pacer_->on_rtt_sample({now_ns, static_cast<uint64_t>(rtt), -1});
}

}  // namespace grex::verbs
