// SPDX-License-Identifier: Apache-2.0
// Nanosecond monotonic clock with a test hook, and a Deadline built on it.
#pragma once

#include <cstdint>

namespace grex {

/// A monotonic nanosecond time source. The process-wide one can be replaced
/// by tests (set_clock_for_testing); production code calls now_ns().
class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t now_ns() const noexcept = 0;
};

/// CLOCK_MONOTONIC.
class SteadyClock final : public Clock {
 public:
  uint64_t now_ns() const noexcept override;
};

/// A clock that moves only when told to (tests).
class ManualClock final : public Clock {
 public:
  explicit ManualClock(uint64_t start_ns = 1'000'000'000) : now_(start_ns) {}
  uint64_t now_ns() const noexcept override { return now_; }
  void advance_ns(uint64_t d) noexcept { now_ += d; }
  void set_ns(uint64_t t) noexcept { now_ = t; }

 private:
  uint64_t now_;
};

/// The process clock (SteadyClock unless replaced).
const Clock& clock() noexcept;
/// Replaces the process clock; pass nullptr to restore the steady clock. Not
/// thread-safe against concurrent now_ns() callers: set it before starting work.
void set_clock_for_testing(const Clock* c) noexcept;
/// Shorthand for clock().now_ns().
inline uint64_t now_ns() noexcept { return clock().now_ns(); }

/// A point in time after which a wait gives up. timeout_ms < 0 means never.
class Deadline {
 public:
  static Deadline after_ms(int64_t timeout_ms) noexcept;
  static Deadline never() noexcept { return Deadline(UINT64_MAX); }
  bool expired() const noexcept { return at_ns_ != UINT64_MAX && now_ns() >= at_ns_; }
  /// Milliseconds left (0 when expired, INT64_MAX when never), for poll(2).
  int64_t remaining_ms() const noexcept;
  uint64_t at_ns() const noexcept { return at_ns_; }

 private:
  explicit Deadline(uint64_t at) : at_ns_(at) {}
  uint64_t at_ns_;
};

/// A deadline for spin loops that mostly end within microseconds: the clock
/// is first read at the first check (after the caller's first batch of
/// spins), not when the wait starts, so a short wait reads it not at all.
/// The wait may thus last one batch longer than timeout_ms. < 0: never.
class SpinDeadline {
 public:
  explicit SpinDeadline(int64_t timeout_ms) noexcept
      : ns_(timeout_ms < 0 ? UINT64_MAX : static_cast<uint64_t>(timeout_ms) * 1'000'000) {}
  bool expired() noexcept {
    if (ns_ == UINT64_MAX) return false;
    const uint64_t now = now_ns();
    if (start_ns_ == 0) {
      start_ns_ = now;
      return false;
    }
    return now - start_ns_ >= ns_;
  }

 private:
  uint64_t ns_;
  uint64_t start_ns_ = 0;
};

}  // namespace grex
