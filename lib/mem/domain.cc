// SPDX-License-Identifier: Apache-2.0
// The installed memory-domain detector (see domain.h).
#include "mem/domain.h"

#include <atomic>

namespace grex::mem {
namespace {

std::atomic<DomainDetector> g_detector{nullptr};

}  // namespace

DomainDetector set_domain_detector(DomainDetector d) noexcept { return g_detector.exchange(d); }

MemoryDomain detect_domain(const void* p) noexcept {
  DomainDetector d = g_detector.load(std::memory_order_acquire);
  return d != nullptr ? d(p) : MemoryDomain::kHost;
}

}  // namespace grex::mem
