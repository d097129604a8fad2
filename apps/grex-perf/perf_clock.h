// SPDX-License-Identifier: Apache-2.0
// The clock grex-perf times with: the monotonic steady clock, in nanoseconds.
#pragma once

#include <chrono>
#include <cstdint>

namespace grex::perf {

/// Nanoseconds on the steady clock (only differences mean anything).
inline uint64_t now_ns() noexcept {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

}  // namespace grex::perf
