// SPDX-License-Identifier: Apache-2.0
// What the reduction kernels of every instruction set share (reduce.cc,
// reduce_avx2.cc, reduce_avx512.cc): the kernel table, the ops, the intrinsics
// headers and the target-region macros. The SIMD kernels themselves are in
// reduce_simd_kernels.h. Private to lib/collectives.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GREX_REDUCE_X86 1
#include <cpuid.h>
#include "core/intrinsics.h"
#else
#define GREX_REDUCE_X86 0
#endif

namespace grex::detail::simd {

enum class Op : uint8_t { kSum = 0, kProd = 1, kMin = 2, kMax = 3 };
constexpr int kDataTypes = 7;  // DataType values 0..6
constexpr int kOps = 4;

using ReduceFn = void (*)(void* d, const void* a, const void* b, size_t n);
using ScaleFn = void (*)(void* p, size_t n, int group);

// The kernels of one SIMD level; null scale entries are integer types, which
// every level divides with the same scalar loop.
struct Kernels {
  ReduceFn reduce[kDataTypes][kOps];
  ScaleFn scale[kDataTypes];
  /// The same arithmetic with streaming stores for dst (the SIMD levels; the
  /// scalar level repeats reduce), for a dst too big to stay in cache.
  ReduceFn reduce_streaming[kDataTypes][kOps];
};

#if GREX_REDUCE_X86

// Compile a region of code for an instruction set (GCC and clang differ).
#define GREX_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define GREX_TARGET_BEGIN(isa) GREX_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define GREX_TARGET_END GREX_PRAGMA(clang attribute pop)
#else
#define GREX_TARGET_BEGIN(isa) GREX_PRAGMA(GCC push_options) GREX_PRAGMA(GCC target(isa))
#define GREX_TARGET_END GREX_PRAGMA(GCC pop_options)
#endif

// Software prefetch of a, b and dst (dst's lines are read for ownership by the
// stores anyway; asking early just overlaps it), for the kinds whose
// conversions take many instructions per cache line (f16, bf16), so that fewer
// lines are in flight within the out-of-order window: on large vectors the
// hardware prefetchers alone leave bf16 about 10% and f16 about 7% below f32
// (measured on Sapphire Rapids, one core, 256 MiB); with it both are within a
// few % of f32. The plain kinds gain nothing. Below kPrefetchMinBytes the data
// is mostly in cache and the prefetches would only cost issue slots.
constexpr size_t kPrefetchBytes = 1024;
constexpr size_t kPrefetchMinBytes = size_t{1} << 20;

/// The tables of the SIMD levels (reduce_avx2.cc, reduce_avx512.cc).
extern const Kernels kAvx2Kernels;
extern const Kernels kAvx512Kernels;

#endif  // GREX_REDUCE_X86

}  // namespace grex::detail::simd
