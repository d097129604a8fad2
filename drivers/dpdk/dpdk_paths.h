// SPDX-License-Identifier: Apache-2.0
// Which of a flow's sprayed paths (UDP source port offsets, GREX_DPDK_PATHS)
// each data packet takes (issue 31). Round robin, or REPS
// (GREX_DPDK_SPRAY=reps, cc::EntropyRecycler): a path whose packet the
// cumulative ACK covered is reused; one whose packet had to be resent is
// forgotten until a fresh draw tries it again. The driver reports what it
// sees: each data packet it sends (a psn below the highest sent is a resend,
// so its first copy's path lost it) and each cumulative ACK from the peer.
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
    const uint32_t path = reps_ ? recycler_.next() % paths_ : rr_++ % paths_;
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
      recycler_.on_clean(path_of_[acked_ % path_of_.size()]);
      ++recycled_;
    }
    acked_ = ack;
  }

  uint32_t paths() const noexcept { return paths_; }
  /// REPS: fresh draws (exploration), and paths the ACKs gave back for reuse.
  uint64_t explored() const noexcept { return recycler_.explored(); }
  uint64_t recycled() const noexcept { return recycled_; }
  uint64_t sent_on(uint32_t path) const noexcept { return path < kMaxPaths ? sent_on_[path] : 0; }
  uint64_t resent_on(uint32_t path) const noexcept { return path < kMaxPaths ? resent_on_[path] : 0; }

 private:
  uint32_t paths_ = 1;
  bool reps_ = false;
  bool sent_any_ = false;
  uint32_t high_ = 0, acked_ = 0, rr_ = 0;
  uint64_t recycled_ = 0;
  std::vector<uint8_t> path_of_ = std::vector<uint8_t>(1, 0);
  cc::EntropyRecycler recycler_{1, 1, 1};
  std::array<uint64_t, kMaxPaths> sent_on_{}, resent_on_{};
};

}  // namespace grex::dpdk
