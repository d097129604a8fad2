// SPDX-License-Identifier: Apache-2.0
// A NIC's per-queue rate limit, set from a controller's decision.
//
// The verbs driver programs it with ibv_modify_qp_rate_limit where the device
// offers packet pacing for its queue pairs' type (ibv_query_device_ex's
// packet_pacing_caps). It sits beside the software token bucket, not in its
// place: the bucket keeps the average at the controller's rate exactly, and
// the NIC spaces the packets of each posted message, which otherwise leave at
// line rate however slowly the bucket lets messages go.
//
// Three things shape when it reprograms:
//  - Setting a rate is a firmware command, so not per RTT sample: at most
//    once per `min_interval_ns`. Between updates the bucket keeps the average.
//  - mlx5-class NICs keep a small table of distinct rates shared by all
//    queues (ENOMEM/ENOSPC when it is full), so limits come from a fixed grid
//    of kLevelsPerOctave levels per octave, not from every rate a flow passes.
//  - A limit above the flow's rate costs nothing (the bucket holds the
//    average); one below it throttles the flow. So the limit is set one level
//    above the rate, goes up as soon as the rate passes it, and comes down
//    only once it is more than kSlackLevels above.
#pragma once

#include <cmath>
#include <cstdint>

namespace grex::cc {

class NicRateLimit {
 public:
  static constexpr int kLevelsPerOctave = 16;  // 4.4 % apart
  static constexpr int kSlackLevels = 4;       // down only past 2^(4/16) = 1.19 x the rate

  /// What the NIC takes, in kbit/s (`max_kbps` 0: not offered).
  struct Range {
    uint32_t min_kbps = 0, max_kbps = 0;
  };

  void reset(Range range, double line_bps, uint64_t min_interval_ns) noexcept {
    *this = NicRateLimit();
    range_ = range;
    line_bps_ = line_bps;
    min_interval_ns_ = min_interval_ns;
  }

  /// Whether limits go to the NIC: offered, and not refused since.
  bool active() const noexcept { return range_.max_kbps > 0 && !refused_; }

  /// The limit to program now for a flow allowed `rate_bps`, in kbit/s
  /// (0: no limit), or -1 to leave the one programmed.
  int64_t next_kbps(double rate_bps, uint64_t now_ns) const noexcept {
    if (!active()) return -1;
    if (set_ && now_ns - at_ns_ < min_interval_ns_) return -1;  // first: this runs per post
    const uint32_t want = level_kbps(rate_bps);
    if (want == kbps_) return -1;  // including no limit on a queue never limited
    if (set_) {
      const double rate_kbps = rate_bps / 1e3, now = static_cast<double>(kbps_);
      const double slack = std::exp2(static_cast<double>(kSlackLevels) / kLevelsPerOctave);
      const bool holds_back = kbps_ != 0 && now < rate_kbps;
      const bool too_loose = want != 0 && (kbps_ == 0 || now > rate_kbps * slack);
      if (!holds_back && !too_loose) return -1;
    }
    return want;
  }

  /// The NIC took `kbps` (as next_kbps returned it) at `now_ns`.
  void programmed(uint32_t kbps, uint64_t now_ns) noexcept {
    kbps_ = kbps;
    at_ns_ = now_ns;
    set_ = true;
    ++updates_;
  }

  /// The NIC refused a limit: software pacing alone from now on. The limit
  /// it took last still holds until the caller clears it (programmed(0)).
  void refused() noexcept { refused_ = true; }

  uint32_t kbps() const noexcept { return kbps_; }
  uint64_t updates() const noexcept { return updates_; }

  /// The speed at which the NIC sends what is posted: its limit, else the line.
  double send_bps() const noexcept {
    const double nic = static_cast<double>(kbps_) * 1e3;
    return kbps_ != 0 && nic < line_bps_ ? nic : line_bps_;
  }

  /// The grid level one above `rate_bps`, within the NIC's range; 0 (no
  /// limit) when that reaches the line rate or the NIC's maximum.
  uint32_t level_kbps(double rate_bps) const noexcept {
    const double kbps = rate_bps / 1e3;
    if (!(kbps > 0)) return range_.min_kbps > 0 ? range_.min_kbps : 1;
    const double k = std::ceil(std::log2(kbps) * kLevelsPerOctave) + 1;
    const double level = std::round(std::exp2(k / kLevelsPerOctave));
    if (level * 1e3 >= line_bps_ || level >= static_cast<double>(range_.max_kbps)) return 0;
    if (level < static_cast<double>(range_.min_kbps)) return range_.min_kbps;
    return static_cast<uint32_t>(level);
  }

 private:
  Range range_;
  double line_bps_ = 0;
  uint64_t min_interval_ns_ = 0;
  uint32_t kbps_ = 0;
  uint64_t at_ns_ = 0, updates_ = 0;
  bool set_ = false, refused_ = false;
};

}  // namespace grex::cc
