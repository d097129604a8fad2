// SPDX-License-Identifier: Apache-2.0
// Seeded fault injection for datagram drivers (the kernel here has no netem):
// decides, packet by packet, to drop, duplicate, delay (reorder) or corrupt.
#pragma once

#include <cstdint>

namespace grex {

struct FaultConfig {
  double drop = 0;             ///< probability a packet is lost
  double duplicate = 0;        ///< probability it is sent twice
  double reorder = 0;          ///< probability it is held back behind later packets
  uint32_t reorder_window = 8; ///< how many later packets overtake a held one (1..window)
  uint32_t lossy_path = UINT32_MAX;  ///< a sprayed path (source port offset) that loses...
  double path_drop = 0;              ///< ... this share of its packets
  double corrupt = 0;          ///< probability one bit is flipped
  double garbage = 0;          ///< probability a junk datagram (random or truncated) is sent as well
  uint64_t seed = 1;
  bool any() const noexcept { return drop > 0 || duplicate > 0 || reorder > 0 || corrupt > 0 || garbage > 0; }
};

/// What to do with one outgoing packet.
struct FaultDecision {
  bool drop = false;
  bool duplicate = false;
  uint32_t delay = 0;        ///< send after this many later packets (0: now)
  bool corrupt = false;
  uint32_t corrupt_bit = 0;  ///< bit index to flip, below 8 * packet length
  bool garbage = false;      ///< also send junk: `garbage_len` bytes, random (seed garbage_seed) or truncated
  bool garbage_truncated = false;  ///< junk is a prefix of this packet rather than random bytes
  uint32_t garbage_len = 0;
  uint64_t garbage_seed = 0;
};

class FaultInjector {
 public:
  explicit FaultInjector(const FaultConfig& cfg = {}) : cfg_(cfg), state_(cfg.seed * 0x9e3779b97f4a7c15ull + 1) {}
  const FaultConfig& config() const noexcept { return cfg_; }

  /// Whether a packet sent over sprayed path `path` is lost there (issue 31: one path lossy).
  bool drop_on_path(uint32_t path) noexcept {
    if (path != cfg_.lossy_path || !chance(cfg_.path_drop)) return false;
    ++dropped_;
    return true;
  }

  /// Decides for a packet of `len` bytes.
  FaultDecision next(uint32_t len) noexcept {
    FaultDecision d;
    if (!cfg_.any()) return d;
    if (chance(cfg_.drop)) {
      d.drop = true;
      ++dropped_;
      return d;
    }
    if (chance(cfg_.duplicate)) {
      d.duplicate = true;
      ++duplicated_;
    }
    if (chance(cfg_.reorder)) {
      d.delay = 1 + static_cast<uint32_t>(rand() % (cfg_.reorder_window == 0 ? 1 : cfg_.reorder_window));
      ++reordered_;
    }
    if (chance(cfg_.garbage)) {
      d.garbage = true;
      d.garbage_truncated = (rand() & 1) != 0 && len > 1;
      d.garbage_len = d.garbage_truncated ? 1 + static_cast<uint32_t>(rand() % (len - 1))
                                          : static_cast<uint32_t>(rand() % 256);
      d.garbage_seed = rand();
      ++garbage_;
    }
    if (len > 0 && chance(cfg_.corrupt)) {
      d.corrupt = true;
      d.corrupt_bit = static_cast<uint32_t>(rand() % (8ull * len));
      ++corrupted_;
    }
    return d;
  }

  uint64_t dropped() const noexcept { return dropped_; }
  uint64_t duplicated() const noexcept { return duplicated_; }
  uint64_t reordered() const noexcept { return reordered_; }
  uint64_t corrupted() const noexcept { return corrupted_; }
  uint64_t garbage() const noexcept { return garbage_; }

 private:
  uint64_t rand() noexcept {  // splitmix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  bool chance(double p) noexcept { return p > 0 && static_cast<double>(rand() >> 11) * 0x1.0p-53 < p; }

  FaultConfig cfg_;
  uint64_t state_;
  uint64_t dropped_ = 0, duplicated_ = 0, reordered_ = 0, corrupted_ = 0, garbage_ = 0;
};

}  // namespace grex
