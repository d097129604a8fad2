// SPDX-License-Identifier: Apache-2.0
// Pacer: what the reliability engine and the verbs driver share to enforce a
// congestion controller's decision: the controller itself (cc::Flow), a token
// bucket filled at its rate, and its window on the bytes in flight.
#pragma once

#include <cstdint>

#include "congestion/cc.h"

namespace grex {

class Pacer {
 public:
  /// Starts `algo` for this flow; `min_burst_bytes` is what the bucket always
  /// lets out at once (two packets), `burst_ns` the idle time it may save up.
  void start(const cc::Algorithm& algo, const cc::Options& opts, const cc::PathInfo& path, uint64_t now_ns,
             double min_burst_bytes, uint64_t burst_ns) noexcept {
    flow_.reset(algo, opts, path, now_ns);
    min_burst_bytes_ = min_burst_bytes;
    burst_ns_ = burst_ns;
    bucket_.reset(now_ns, min_burst_bytes);
  }
  bool active() const noexcept { return flow_.active(); }
  /// The controller (active() only).
  cc::Controller* operator->() noexcept { return flow_.operator->(); }
  const cc::Flow& flow() const noexcept { return flow_; }

  /// Whether a packet may leave now: the bucket holds tokens and, where the
  /// controller sets a window, fewer than it are in flight. Always true when
  /// no controller runs. Counts a refusal in waits().
  bool allows(uint64_t now_ns, uint64_t in_flight_bytes) noexcept {
    if (!flow_.active()) return true;
    const cc::Decision d = set_.rate_bps > 0 ? set_ : flow_->decision();
    rate_bps_ = d.rate_bps;
    bool ok = bucket_.allows(now_ns, d.rate_bps, min_burst_bytes_, burst_ns_);
    if (ok && d.window_bytes > 0) ok = in_flight_bytes < d.window_bytes;
    if (!ok) ++waits_;
    return ok;
  }
  /// A packet left: `wire_bytes` come out of the bucket, and the controller
  /// hears of `payload_bytes` sent.
  void sent(uint64_t wire_bytes, uint64_t payload_bytes, uint64_t now_ns) noexcept {
    if (!flow_.active()) return;
    bucket_.take(static_cast<double>(wire_bytes));
    flow_->on_bytes_sent(now_ns, payload_bytes);
  }
  /// Paces at `d` instead of the controller's decision (rate 0: the
  /// controller's again). A driver that runs a controller per path paces the
  /// flow at their sum; this controller still hears everything.
  void set_decision(const cc::Decision& d) noexcept { set_ = d; }
  /// Whether set_decision() paces now, not the controller.
  bool decision_set() const noexcept { return set_.rate_bps > 0; }
  /// The rate of the controller's last decision (0: none yet).
  double rate_bps() const noexcept { return rate_bps_; }
  /// How often allows() said no.
  uint64_t waits() const noexcept { return waits_; }

 private:
  cc::Flow flow_;
  cc::Decision set_{0, 0};
  cc::TokenBucket bucket_;
  double min_burst_bytes_ = 0, rate_bps_ = 0;
  uint64_t burst_ns_ = 0, waits_ = 0;
};

}  // namespace grex
