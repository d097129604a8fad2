// SPDX-License-Identifier: Apache-2.0
// Named event counters: written by one thread on the data path, read by any.
#pragma once

#include <atomic>
#include <cstdint>

namespace grex {

/// One counter. Increments use relaxed atomics: no fences on the data path,
/// and a reader in another thread sees a recent value.
class Counter {
 public:
  void add(uint64_t n = 1) noexcept {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }
  void reset() noexcept { v_.store(0, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

}  // namespace grex
