// SPDX-License-Identifier: Apache-2.0
// Process clock and Deadline.
#include "core/clock.h"

#include <time.h>

#include <atomic>

namespace grex {
namespace {
const SteadyClock g_steady;
std::atomic<const Clock*> g_clock{&g_steady};
}  // namespace

uint64_t SteadyClock::now_ns() const noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

const Clock& clock() noexcept { return *g_clock.load(std::memory_order_acquire); }

void set_clock_for_testing(const Clock* c) noexcept {
  g_clock.store(c != nullptr ? c : &g_steady, std::memory_order_release);
}

Deadline Deadline::after_ms(int64_t timeout_ms) noexcept {
  if (timeout_ms < 0) return never();
  return Deadline(now_ns() + static_cast<uint64_t>(timeout_ms) * 1'000'000ull);
}

int64_t Deadline::remaining_ms() const noexcept {
  if (at_ns_ == UINT64_MAX) return INT64_MAX;
  uint64_t now = now_ns();
  if (now >= at_ns_) return 0;
  return static_cast<int64_t>((at_ns_ - now + 999'999) / 1'000'000);
}

}  // namespace grex
