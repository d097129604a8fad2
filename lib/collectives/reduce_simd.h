// SPDX-License-Identifier: Apache-2.0
// What the reduction kernels of every instruction set share (reduce.cc,
// reduce_avx2.cc, reduce_avx512.cc): the kernel table, the ops, the intrinsics
// headers and GREX_DEFINE_DRIVER, the loop each SIMD level stamps out.
// Private to lib/collectives.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GREX_REDUCE_X86 1
#include <cpuid.h>
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which
// -W(maybe-)uninitialized flags once inlined (GCC bug 105593, fixed in 13).
// Diagnostic pragmas go by source location: this silences the header only.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
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

// The SIMD driver, stamped into each instruction-set region: K is a "kind"
// (one per dtype) with T, kLanes elements per vector step, kPrefetch,
// block<op>(d, a, b) for one step, and for floating kinds scale_block(p, inv)
// (inv as K::Inv).
//   run:   the first piece up to dst's kVecBytes alignment, 4 steps per
//          iteration (prefetching 1 KiB ahead on large heavy kinds),
//          single steps, then the tail.
//   part:  fewer than kLanes elements through a stack buffer, so heads and
//          tails do exactly the arithmetic of the full steps.
#define GREX_DEFINE_DRIVER()                                                                           \
  template <class T>                                                                                   \
  inline size_t head_elems(const T* d, size_t n) {                                                     \
    auto addr = reinterpret_cast<uintptr_t>(d);                                                        \
    if (addr % sizeof(T) != 0) return 0;                                                               \
    return std::min(n, ((kVecBytes - addr % kVecBytes) % kVecBytes) / sizeof(T));                      \
  }                                                                                                    \
  template <class K, Op op>                                                                            \
  void part(typename K::T* d, const typename K::T* a, const typename K::T* b, size_t n) {              \
    using T = typename K::T;                                                                           \
    alignas(64) T x[K::kLanes] = {};                                                                   \
    alignas(64) T y[K::kLanes] = {};                                                                   \
    alignas(64) T z[K::kLanes];                                                                        \
    std::memcpy(x, a, n * sizeof(T));                                                                  \
    std::memcpy(y, b, n * sizeof(T));                                                                  \
    K::template block<op>(z, x, y);                                                                    \
    std::memcpy(d, z, n * sizeof(T));                                                                  \
  }                                                                                                    \
  template <class K, Op op, bool nt = false>                                                           \
  void run(void* dv, const void* av, const void* bv, size_t n) {                                       \
    using T = typename K::T;                                                                           \
    constexpr size_t L = K::kLanes;                                                                    \
    auto* d = static_cast<T*>(dv);                                                                     \
    const auto* a = static_cast<const T*>(av);                                                         \
    const auto* b = static_cast<const T*>(bv);                                                         \
    size_t i = head_elems(d, n);                                                                       \
    if constexpr (nt) {                                                                                \
      if (reinterpret_cast<uintptr_t>(d + i) % kVecBytes != 0) return run<K, op>(dv, av, bv, n);       \
    }                                                                                                  \
    if (i != 0) part<K, op>(d, a, b, i);                                                               \
    if (K::kPrefetch && n * sizeof(T) >= kPrefetchMinBytes) {                                          \
      for (; i + 4 * L <= n; i += 4 * L) {                                                             \
        for (size_t k = 0; k < 4 * kVecBytes; k += 64) {                                               \
          _mm_prefetch(reinterpret_cast<const char*>(a + i) + kPrefetchBytes + k, _MM_HINT_T0);        \
          _mm_prefetch(reinterpret_cast<const char*>(b + i) + kPrefetchBytes + k, _MM_HINT_T0);        \
          if (!nt) _mm_prefetch(reinterpret_cast<const char*>(d + i) + kPrefetchBytes + k, _MM_HINT_T0); \
        }                                                                                              \
        K::template block<op, nt>(d + i, a + i, b + i);                                                \
        K::template block<op, nt>(d + i + L, a + i + L, b + i + L);                                    \
        K::template block<op, nt>(d + i + 2 * L, a + i + 2 * L, b + i + 2 * L);                        \
        K::template block<op, nt>(d + i + 3 * L, a + i + 3 * L, b + i + 3 * L);                        \
      }                                                                                                \
    }                                                                                                  \
    for (; i + 4 * L <= n; i += 4 * L) {                                                               \
      K::template block<op, nt>(d + i, a + i, b + i);                                                  \
      K::template block<op, nt>(d + i + L, a + i + L, b + i + L);                                      \
      K::template block<op, nt>(d + i + 2 * L, a + i + 2 * L, b + i + 2 * L);                          \
      K::template block<op, nt>(d + i + 3 * L, a + i + 3 * L, b + i + 3 * L);                          \
    }                                                                                                  \
    for (; i + L <= n; i += L) K::template block<op, nt>(d + i, a + i, b + i);                         \
    if (i < n) part<K, op>(d + i, a + i, b + i, n - i);                                                \
    if constexpr (nt) _mm_sfence();                                                                    \
  }                                                                                                    \
  template <class K>                                                                                   \
  void scale_part(typename K::T* p, size_t n, typename K::Inv inv) {                                   \
    using T = typename K::T;                                                                           \
    alignas(64) T x[K::kLanes] = {};                                                                   \
    std::memcpy(x, p, n * sizeof(T));                                                                  \
    K::scale_block(x, inv);                                                                            \
    std::memcpy(p, x, n * sizeof(T));                                                                  \
  }                                                                                                    \
  template <class K>                                                                                   \
  void scale(void* pv, size_t n, int group) {                                                          \
    using T = typename K::T;                                                                           \
    using Inv = typename K::Inv;                                                                       \
    constexpr size_t L = K::kLanes;                                                                    \
    auto* p = static_cast<T*>(pv);                                                                     \
    Inv inv = Inv{1} / static_cast<Inv>(group);                                                        \
    size_t i = head_elems(p, n);                                                                       \
    if (i != 0) scale_part<K>(p, i, inv);                                                              \
    for (; i + 4 * L <= n; i += 4 * L) {                                                               \
      K::scale_block(p + i, inv);                                                                      \
      K::scale_block(p + i + L, inv);                                                                  \
      K::scale_block(p + i + 2 * L, inv);                                                              \
      K::scale_block(p + i + 3 * L, inv);                                                              \
    }                                                                                                  \
    for (; i + L <= n; i += L) K::scale_block(p + i, inv);                                             \
    if (i < n) scale_part<K>(p + i, n - i, inv);                                                       \
  }                                                                                                    \
  template <class K, bool nt>                                                                          \
  constexpr auto row() {                                                                               \
    return std::array<ReduceFn, kOps>{run<K, Op::kSum, nt>, run<K, Op::kProd, nt>, run<K, Op::kMin, nt>, \
                                      run<K, Op::kMax, nt>};                                           \
  }                                                                                                    \
  template <bool nt>                                                                                   \
  constexpr void fill(ReduceFn (&table)[kDataTypes][kOps]) {                                           \
    std::array<ReduceFn, kOps> rows[kDataTypes] = {row<Native<float>, nt>(),   row<Native<double>, nt>(), \
                                                   row<Native<int32_t>, nt>(), row<Native<int64_t>, nt>(), \
                                                   row<Native<uint8_t>, nt>(), row<F16, nt>(),         \
                                                   row<BF16, nt>()};                                   \
    for (int t = 0; t < kDataTypes; ++t)                                                               \
      for (int o = 0; o < kOps; ++o) table[t][o] = rows[t][static_cast<size_t>(o)];                    \
  }                                                                                                    \
  constexpr Kernels make_kernels() {                                                                   \
    Kernels k{};                                                                                       \
    fill<false>(k.reduce);                                                                             \
    fill<true>(k.reduce_streaming);                                                                    \
    k.scale[0] = scale<Native<float>>;                                                                 \
    k.scale[1] = scale<Native<double>>;                                                                \
    k.scale[5] = scale<F16>;                                                                           \
    k.scale[6] = scale<BF16>;                                                                          \
    return k;                                                                                          \
  }                                                                                                    \
  constexpr Kernels kKernels = make_kernels();

/// The tables of the SIMD levels (reduce_avx2.cc, reduce_avx512.cc).
extern const Kernels kAvx2Kernels;
extern const Kernels kAvx512Kernels;

#endif  // GREX_REDUCE_X86

}  // namespace grex::detail::simd
