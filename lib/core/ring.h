// SPDX-License-Identifier: Apache-2.0
// Ring<T>: a fixed-capacity first-in first-out queue on a power-of-two array,
// indexed by masking. The one ring the drivers and the reliability engine use
// for their queues of requests, messages and completions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace grex {

/// A bounded FIFO. The capacity is rounded up to a power of two once, at
/// reset(); afterwards nothing allocates. Not thread-safe.
template <typename T>
class Ring {
 public:
  Ring() = default;
  explicit Ring(size_t capacity) { reset(capacity); }

  /// Empties the ring and sizes it for at least `capacity` elements (allocates).
  void reset(size_t capacity) {
    size_t n = 1;
    while (n < capacity) n <<= 1;
    slots_.assign(capacity == 0 ? 0 : n, T{});
    mask_ = slots_.empty() ? 0 : slots_.size() - 1;
    head_ = tail_ = 0;
  }

  size_t capacity() const noexcept { return slots_.size(); }
  size_t size() const noexcept { return static_cast<size_t>(tail_ - head_); }
  bool empty() const noexcept { return tail_ == head_; }
  bool full() const noexcept { return size() == slots_.size(); }

  /// Appends `v`; false (and nothing changes) when full.
  bool push(const T& v) noexcept {
    if (full()) return false;
    slots_[tail_++ & mask_] = v;
    return true;
  }
  /// The oldest element; the ring must not be empty.
  T& front() noexcept { return slots_[head_ & mask_]; }
  const T& front() const noexcept { return slots_[head_ & mask_]; }
  /// The newest element; the ring must not be empty.
  T& back() noexcept { return slots_[(tail_ - 1) & mask_]; }
  /// Drops the oldest element; the ring must not be empty.
  void pop() noexcept { ++head_; }
  /// The i-th oldest element (0: front), i < size().
  T& operator[](size_t i) noexcept { return slots_[(head_ + i) & mask_]; }
  const T& operator[](size_t i) const noexcept { return slots_[(head_ + i) & mask_]; }
  void clear() noexcept { head_ = tail_; }

 private:
  std::vector<T> slots_;
  size_t mask_ = 0;
  uint64_t head_ = 0, tail_ = 0;  // free-running: size is tail - head
};

}  // namespace grex
