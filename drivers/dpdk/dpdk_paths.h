// SPDX-License-Identifier: Apache-2.0
// Which of a flow's sprayed paths (UDP source port offsets, GREX_DPDK_PATHS)
// each data packet takes (issue 31). Round robin, or REPS
// (GREX_DPDK_SPRAY=reps, cc::EntropyRecycler): a path whose packet the
// cumulative ACK covered is reused; one whose packet had to be resent is
// forgotten until a fresh draw tries it again. The driver reports what it
// sees: each data packet it sends (a psn below the highest sent is a resend,
// so its first copy's path lost it), each cumulative ACK from the peer, and
// the RTT each ACK's echo measures for the path its packet took. A path
// whose RTT floor stays far above the other paths' is slow (a queue stands
// there: the delay-based form of REPS's ECN mark): under REPS
// its packets are not given back for reuse, so it is used less, and
// abandoned while it stays slow; a fresh draw tries it again now and then.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "congestion/multipath.h"

namespace grex::dpdk {

class PathChooser {
 public:
  static constexpr uint32_t kMaxPaths = 64;

  /// `span`: the flow's PSN span (the psns that can be unacknowledged at once).
  void reset(uint32_t paths, bool reps, uint32_t span, uint64_t seed) {
    paths_ = paths == 0 ? 1 : paths;
    srtt_ns_.fill(0);
    floor_.fill(0);
    slow_.fill(false);
    since_reprobe_ = reprobe_next_ = 0;
    reps_ = reps && paths_ > 1;
    if (paths_ <= 1) return;  // one path: nothing to record
    path_of_.assign(span == 0 ? 1 : span, 0);
    // Room for a window's worth of clean paths: one ACK covers many packets,
    // and each comes back to be reused (REPS keeps about a BDP of them).
    if (reps_) recycler_ = cc::EntropyRecycler(seed, static_cast<uint32_t>(path_of_.size()), paths_);
  }

  /// The path of data packet `psn`, recorded until the ACK covers it.
  uint32_t choose(uint32_t psn) noexcept {
    if (paths_ <= 1) return 0;
    uint8_t& slot = path_of_[psn % path_of_.size()];
    if (sent_any_ && static_cast<int32_t>(psn - high_) < 0) {  // a resend: its first copy's path lost it
      if (reps_) recycler_.on_congested(slot);
      ++resent_on_[slot];
    } else {
      high_ = psn + 1;
      sent_any_ = true;
    }
    uint32_t path = reps_ ? recycler_.next() % paths_ : rr_++ % paths_;
    // A path abandoned as slow gets one packet in kReprobeEvery: its echo
    // says whether the queue there has drained.
    if (reps_ && ++since_reprobe_ >= kReprobeEvery) {
      for (uint32_t i = 0; i < paths_; ++i) {
        const uint32_t q = (reprobe_next_ + i) % paths_;
        if (!slow_[q]) continue;
        path = q;
        reprobe_next_ = q + 1;
        since_reprobe_ = 0;
        ++reprobes_;
        break;
      }
    }
    slot = static_cast<uint8_t>(path);
    ++sent_on_[path];
    return path;
  }

  /// The peer's cumulative ACK: every psn below `ack` arrived, over a path that delivered.
  void acked(uint32_t ack) noexcept {
    if (!reps_ || !sent_any_) {
      acked_ = ack;
      return;
    }
    for (uint32_t n = 0; acked_ != ack && static_cast<int32_t>(ack - acked_) > 0 && n < path_of_.size(); ++n, ++acked_) {
      const uint8_t path = path_of_[acked_ % path_of_.size()];
      if (slow_[path]) continue;
      recycler_.on_clean(path);
      ++recycled_;
    }
    acked_ = ack;
  }

  /// The RTT `rtt_ns` of data packet `psn`, which the peer's ACK echoed.
  void rtt_sample(uint32_t psn, uint64_t rtt_ns) noexcept {
    // Only a packet still tracked: its slot names the path it took.
    if (paths_ <= 1 || !sent_any_ || static_cast<int32_t>(psn - high_) >= 0 ||
        high_ - psn > static_cast<uint32_t>(path_of_.size()))
      return;
    const uint8_t path = path_of_[psn % path_of_.size()];
    const auto r = static_cast<double>(rtt_ns);
    double& s = srtt_ns_[path];
    s = s == 0 ? r : 0.875 * s + 0.125 * r;
    // Each path keeps a floor: it falls to a lower sample at once and rises
    // toward higher ones by 1/64 a sample. A queue that comes and goes (the
    // flow's own window through a shared queue, a poll loop's jitter) leaves
    // every path's floor near the empty queue's RTT; a queue that stands on
    // one path lifts that path's floor above the others'.
    double& f = floor_[path];
    f = f == 0 || r < f ? r : f + (r - f) / 64;
    const double bar = kSlowFactor * lowest_floor() + kSlowSlackNs;
    if (slow_[path]) {
      // An abandoned path's sample is a probe: one back fast says its queue
      // drained, and the path is used again at once.
      if (r > bar) {
        ++slow_marks_[path];
        if (reps_) recycler_.on_congested(path);
        return;
      }
      slow_[path] = false;
      f = r;
      if (reps_)
        for (uint32_t i = 0; i < kReadmit; ++i) recycler_.on_clean(path);
      return;
    }
    if (f <= bar) return;
    slow_[path] = true;
    ++slow_marks_[path];
    if (reps_) recycler_.on_congested(path);
  }

  double lowest_floor() const noexcept {
    double best = 0;
    for (uint32_t i = 0; i < paths_; ++i)
      if (floor_[i] > 0 && (best == 0 || floor_[i] < best)) best = floor_[i];
    return best;
  }

  uint32_t paths() const noexcept { return paths_; }
  /// Smoothed RTT of a path from the ACKs' echoes (0: no sample yet), and
  /// how many of its samples were slow.
  uint64_t srtt_ns(uint32_t path) const noexcept { return path < kMaxPaths ? static_cast<uint64_t>(srtt_ns_[path]) : 0; }
  uint64_t slow_marks(uint32_t path) const noexcept { return path < kMaxPaths ? slow_marks_[path] : 0; }
  /// REPS: fresh draws (exploration), and paths the ACKs gave back for reuse.
  uint64_t explored() const noexcept { return recycler_.explored(); }
  uint64_t recycled() const noexcept { return recycled_; }
  /// Packets sent on a path abandoned as slow, to see whether it recovered.
  uint64_t reprobes() const noexcept { return reprobes_; }
  uint64_t sent_on(uint32_t path) const noexcept { return path < kMaxPaths ? sent_on_[path] : 0; }
  uint64_t resent_on(uint32_t path) const noexcept { return path < kMaxPaths ? resent_on_[path] : 0; }

 private:
  // Slow: a path's floor above twice the lowest floor plus 50 us. (Against
  // each path's smoothed RTT, identical paths through one shared queue,
  // sampled at different moments, differed by up to 17x on memif and were
  // marked as often as a lossy path was resent; against the flow's average
  // or its last few samples, the link most ports hashed onto set the
  // reference and was never marked.)
  static constexpr double kSlowFactor = 2.0;
  static constexpr double kSlowSlackNs = 50'000;
  static constexpr uint32_t kReprobeEvery = 256;
  static constexpr uint32_t kReadmit = 4;  // packets' worth of a recovered path put back for reuse

  uint32_t paths_ = 1;
  bool reps_ = false;
  bool sent_any_ = false;
  uint32_t high_ = 0, acked_ = 0, rr_ = 0;
  uint64_t recycled_ = 0, reprobes_ = 0;
  uint32_t since_reprobe_ = 0, reprobe_next_ = 0;
  std::vector<uint8_t> path_of_ = std::vector<uint8_t>(1, 0);
  cc::EntropyRecycler recycler_{1, 1, 1};
  std::array<uint64_t, kMaxPaths> sent_on_{}, resent_on_{}, slow_marks_{};
  std::array<double, kMaxPaths> srtt_ns_{};
  std::array<double, kMaxPaths> floor_{};  // per path (0: no sample yet)
  std::array<bool, kMaxPaths> slow_{};
};

}  // namespace grex::dpdk
