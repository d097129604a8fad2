// SPDX-License-Identifier: Apache-2.0
// Memory-domain detection: which domain the bytes at a pointer live in. The
// GPU layer installs a detector when libgrex loads; the transport asks it about
// memory registered as host memory. Neither includes the other.
#pragma once

#include <grex/memory.h>

namespace grex::mem {

/// Says where the bytes at `p` live. Must not block, allocate or fail: it runs
/// on every Device::register_memory of host memory.
using DomainDetector = MemoryDomain (*)(const void* p) noexcept;

/// Installs `d` (nullptr: none, every pointer is host memory) and returns the
/// detector it replaces. Thread-safe.
DomainDetector set_domain_detector(DomainDetector d) noexcept;

/// The installed detector's answer for `p`; kHost when none is installed.
MemoryDomain detect_domain(const void* p) noexcept;

}  // namespace grex::mem
