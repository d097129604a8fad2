// SPDX-License-Identifier: Apache-2.0
// Choosing the entropy (the UDP source port an ECMP hash sees) of each packet
// of a sprayed flow, after REPS (recycled entropy packet spraying, as Ultra
// Ethernet's transport describes it): an entropy whose packet came back clean
// is used again; one whose packet came back congestion-marked, or was
// trimmed or lost, is forgotten, so the flow drifts away from busy, slow or
// broken paths; with no clean entropy at hand, a fresh random one explores,
// redrawn (up to three times) when it is one of the last few congested ones.
// Pure and allocation-free after construction: the simulator's fabric runs it,
// and a driver can.
#pragma once

#include <cstdint>
#include <vector>

namespace grex::cc {

class EntropyRecycler {
 public:
  /// `cache`: clean entropies kept at most (a power of two is not needed);
  /// `space`: entropies are drawn from [0, space).
  explicit EntropyRecycler(uint64_t seed = 1, uint32_t cache = 256, uint32_t space = 65536)
      : ring_(cache == 0 ? 1 : cache), state_(seed * 0x9e3779b97f4a7c15ull + 1), space_(space == 0 ? 1 : space) {}

  /// The entropy for the next packet: the oldest clean one, else a fresh one.
  uint32_t next() noexcept {
    if (n_ > 0) {
      const uint32_t e = ring_[head_];
      head_ = (head_ + 1) % ring_.size();
      --n_;
      return e;
    }
    ++explored_;
    return fresh();
  }
  /// The packet sent with `e` was acknowledged without a congestion mark: `e` is good to reuse.
  void on_clean(uint32_t e) noexcept {
    if (n_ == ring_.size()) return;  // enough good ones at hand
    ring_[(head_ + n_) % ring_.size()] = e;
    ++n_;
  }
  /// The packet sent with `e` came back marked, or was trimmed or lost: `e` is not reused.
  void on_congested(uint32_t e) noexcept {
    bad_[bad_next_++ % kBad] = e + 1;
    ++dropped_;
  }
  /// Clean entropies at hand.
  uint32_t cached() const noexcept { return n_; }
  /// Fresh entropies drawn so far (exploration).
  uint64_t explored() const noexcept { return explored_; }
  /// Entropies dropped for congestion so far.
  uint64_t dropped() const noexcept { return dropped_; }

 private:
  static constexpr uint32_t kBad = 8;  // congested entropies a fresh draw avoids

  uint32_t draw() noexcept {  // xorshift64*
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return static_cast<uint32_t>((state_ * 0x2545f4914f6cdd1dull) >> 32) % space_;
  }
  bool recently_bad(uint32_t e) const noexcept {
    for (uint32_t b : bad_)
      if (b == e + 1) return true;
    return false;
  }
  // A random entropy, redrawn up to three times while it is one of the last
  // congested ones: exploring mostly elsewhere, and still now and then there
  // (a path that recovered is found again).
  uint32_t fresh() noexcept {
    uint32_t e = draw();
    for (int i = 0; i < 3 && recently_bad(e); ++i) e = draw();
    return e;
  }

  std::vector<uint32_t> ring_;
  uint32_t head_ = 0, n_ = 0;
  uint64_t state_;
  uint32_t space_;
  uint64_t explored_ = 0, dropped_ = 0;
  uint32_t bad_[kBad] = {};  // entropy + 1 (0: empty)
  uint32_t bad_next_ = 0;
};

}  // namespace grex::cc
