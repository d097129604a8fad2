// SPDX-License-Identifier: Apache-2.0
// Constructors of the registered controllers (one .cc file each).
#pragma once

#include "congestion/cc.h"

namespace grex::cc::detail {

Controller* construct_rttcc(void* storage, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept;
Controller* construct_dcqcn(void* storage, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept;
Controller* construct_timely(void* storage, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept;
Controller* construct_swift(void* storage, const Options& opts, const PathInfo& path, uint64_t now_ns) noexcept;

}  // namespace grex::cc::detail
