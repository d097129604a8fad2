// SPDX-License-Identifier: Apache-2.0
// The SIMD reduction kernels, written once over a vector-traits struct V that each instruction set defines
// (reduce_avx2.cc, reduce_avx512.cc). Private to lib/collectives.
//
// A template is compiled for the instruction set in force where it is defined, not where it is instantiated:
// include this header inside the GREX_TARGET_BEGIN region of V's instruction set (after the standard headers),
// and instantiate it there with that V only. Every template here takes V, so the two translation units never
// emit the same symbol.
//
// V provides, for vectors of kVecBytes bytes: F (f32 lanes), D (f64), I (integers) and H (kVecBytes / 4
// f16s, half a vector); load(const float*), load(const double*), loadi(const void*), loadh(const void*);
// put<nt>(float*, F), put<nt>(double*, D), put<nt>(void*, I), put<nt>(void*, H) (nt: a streaming store, dst
// aligned to the vector); set1(float), set1(double), set1_epi32(int); on F and D add, mul, min and max as
// minps/maxps (min(x, y) is x < y ? x : y, else y) and canon (a NaN lane becomes the canonical quiet NaN);
// iadd<E>, imul<E>, imin<E>, imax<E> on I for E = int32_t, int64_t, uint8_t (wrapping); cvtph (H to F) and
// cvtps (F to H, to nearest even); as_f, as_i (bit casts), and_i, or_i, add32, shl16, shr16 (per 32-bit lane).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives/reduce_simd.h"

#if GREX_REDUCE_X86

namespace grex::detail::simd {

// The f32 or f64 op on whole vectors. Min and max pass y first, so that x is kept when either is NaN or both
// compare equal (y < x ? y : x); every NaN the op gives, whatever its inputs' payloads, becomes the canonical
// one (reduce.h): addps with two NaNs keeps its first operand's, and the compiler may swap the operands of a
// commutative add, so without canon the bits would depend on register allocation.
template <class V, Op op, class X>
inline X fop(X x, X y) {
  if constexpr (op == Op::kSum) return V::canon(V::add(x, y));
  else if constexpr (op == Op::kProd) return V::canon(V::mul(x, y));
  else if constexpr (op == Op::kMin) return V::canon(V::min(y, x));
  else return V::canon(V::max(y, x));
}

template <class V, Op op, class E>
inline typename V::I iop(typename V::I x, typename V::I y) {
  if constexpr (op == Op::kSum) return V::template iadd<E>(x, y);
  else if constexpr (op == Op::kProd) return V::template imul<E>(x, y);
  else if constexpr (op == Op::kMin) return V::template imin<E>(x, y);
  else return V::template imax<E>(x, y);
}

// A "kind" (one per dtype): T, Inv (the scale factor's type), kLanes elements per step, kPrefetch,
// block<op, nt>(d, a, b) for one step and scale_block(p, inv).

template <class V, class E>
struct Native {
  using T = E;
  using Inv = std::conditional_t<std::is_same_v<E, double>, double, float>;
  static constexpr size_t kLanes = V::kVecBytes / sizeof(E);
  static constexpr bool kPrefetch = false;
  template <Op op, bool nt = false>
  static void block(T* d, const T* a, const T* b) {
    if constexpr (std::is_floating_point_v<E>) V::template put<nt>(d, fop<V, op>(V::load(a), V::load(b)));
    else V::template put<nt>(static_cast<void*>(d), iop<V, op, E>(V::loadi(a), V::loadi(b)));
  }
  static void scale_block(T* p, Inv inv) {
    if constexpr (std::is_floating_point_v<E>) V::template put<false>(p, V::canon(V::mul(V::load(p), V::set1(inv))));
  }
};

// f16: two f32 vectors per step, widened and narrowed by F16C (or its AVX-512 form).
template <class V>
struct F16 {
  using T = uint16_t;
  using Inv = float;
  static constexpr size_t kHalf = V::kVecBytes / sizeof(float);
  static constexpr size_t kLanes = 2 * kHalf;
  static constexpr bool kPrefetch = true;
  static typename V::F load(const T* p) { return V::cvtph(V::loadh(p)); }
  template <bool nt = false>
  static void store(T* p, typename V::F v) {
    V::template put<nt>(static_cast<void*>(p), V::cvtps(v));
  }
  template <Op op, bool nt = false>
  static void block(T* d, const T* a, const T* b) {
    typename V::F lo = fop<V, op>(load(a), load(b));
    typename V::F hi = fop<V, op>(load(a + kHalf), load(b + kHalf));
    store<nt>(d, lo);
    store<nt>(d + kHalf, hi);
  }
  static void scale_block(T* p, float inv) {
    typename V::F v = V::set1(inv);
    typename V::F lo = V::canon(V::mul(load(p), v));
    typename V::F hi = V::canon(V::mul(load(p + kHalf), v));
    store(p, lo);
    store(p + kHalf, hi);
  }
};

// bf16: one vector per step; in each 32-bit lane the even element is the low half (widened by a left shift)
// and the odd one the high half (widened by a mask).
template <class V>
struct BF16 {
  using T = uint16_t;
  using Inv = float;
  using F = typename V::F;
  using I = typename V::I;
  static constexpr size_t kLanes = V::kVecBytes / sizeof(T);
  static constexpr bool kPrefetch = true;
  static I top_half() { return V::set1_epi32(static_cast<int>(0xffff0000u)); }
  static F even(I v) { return V::as_f(V::shl16(v)); }
  static F odd(I v) { return V::as_f(V::and_i(v, top_half())); }
  // The bf16 nearest x (ties to even) in the top half of each lane, the low half junk. x holds no NaN but the
  // canonical one (fop and scale_block make it so), which this rounds to itself: 0x7fc00000 + 0x7fff.
  static I round(F x) {
    I u = V::as_i(x);
    I lsb = V::and_i(V::shr16(u), V::set1_epi32(1));
    return V::add32(u, V::add32(lsb, V::set1_epi32(0x7fff)));
  }
  static I pack(F ev, F od) { return V::or_i(V::shr16(round(ev)), V::and_i(round(od), top_half())); }
  template <Op op, bool nt = false>
  static void block(T* d, const T* a, const T* b) {
    I x = V::loadi(a);
    I y = V::loadi(b);
    V::template put<nt>(static_cast<void*>(d), pack(fop<V, op>(even(x), even(y)), fop<V, op>(odd(x), odd(y))));
  }
  static void scale_block(T* p, float inv) {
    F v = V::set1(inv);
    I x = V::loadi(p);
    V::template put<false>(static_cast<void*>(p), pack(V::canon(V::mul(even(x), v)), V::canon(V::mul(odd(x), v))));
  }
};

// ------------------------------------------------------------------------------------------------ the loop
//   run:   the first piece up to dst's kVecBytes alignment, 4 steps per iteration (prefetching 1 KiB ahead on
//          large heavy kinds), single steps, then the tail.
//   part:  fewer than kLanes elements through a stack buffer, so heads and tails do exactly the arithmetic
//          of the full steps.

template <class V, class T>
inline size_t head_elems(const T* d, size_t n) {
  auto addr = reinterpret_cast<uintptr_t>(d);
  if (addr % sizeof(T) != 0) return 0;
  return std::min(n, ((V::kVecBytes - addr % V::kVecBytes) % V::kVecBytes) / sizeof(T));
}

template <class V, class K, Op op>
void part(typename K::T* d, const typename K::T* a, const typename K::T* b, size_t n) {
  using T = typename K::T;
  alignas(64) T x[K::kLanes] = {};
  alignas(64) T y[K::kLanes] = {};
  alignas(64) T z[K::kLanes];
  std::memcpy(x, a, n * sizeof(T));
  std::memcpy(y, b, n * sizeof(T));
  K::template block<op>(z, x, y);
  std::memcpy(d, z, n * sizeof(T));
}

template <class V, class K, Op op, bool nt = false>
void run(void* dv, const void* av, const void* bv, size_t n) {
  using T = typename K::T;
  constexpr size_t L = K::kLanes;
  auto* d = static_cast<T*>(dv);
  const auto* a = static_cast<const T*>(av);
  const auto* b = static_cast<const T*>(bv);
  size_t i = head_elems<V>(d, n);
  if constexpr (nt) {
    if (reinterpret_cast<uintptr_t>(d + i) % V::kVecBytes != 0) return run<V, K, op>(dv, av, bv, n);
  }
  if (i != 0) part<V, K, op>(d, a, b, i);
  if (K::kPrefetch && n * sizeof(T) >= kPrefetchMinBytes) {
    for (; i + 4 * L <= n; i += 4 * L) {
      for (size_t k = 0; k < 4 * V::kVecBytes; k += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(a + i) + kPrefetchBytes + k, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b + i) + kPrefetchBytes + k, _MM_HINT_T0);
        if (!nt) _mm_prefetch(reinterpret_cast<const char*>(d + i) + kPrefetchBytes + k, _MM_HINT_T0);
      }
      K::template block<op, nt>(d + i, a + i, b + i);
      K::template block<op, nt>(d + i + L, a + i + L, b + i + L);
      K::template block<op, nt>(d + i + 2 * L, a + i + 2 * L, b + i + 2 * L);
      K::template block<op, nt>(d + i + 3 * L, a + i + 3 * L, b + i + 3 * L);
    }
  }
  for (; i + 4 * L <= n; i += 4 * L) {
    K::template block<op, nt>(d + i, a + i, b + i);
    K::template block<op, nt>(d + i + L, a + i + L, b + i + L);
    K::template block<op, nt>(d + i + 2 * L, a + i + 2 * L, b + i + 2 * L);
    K::template block<op, nt>(d + i + 3 * L, a + i + 3 * L, b + i + 3 * L);
  }
  for (; i + L <= n; i += L) K::template block<op, nt>(d + i, a + i, b + i);
  if (i < n) part<V, K, op>(d + i, a + i, b + i, n - i);
  if constexpr (nt) _mm_sfence();
}

template <class V, class K>
void scale_part(typename K::T* p, size_t n, typename K::Inv inv) {
  using T = typename K::T;
  alignas(64) T x[K::kLanes] = {};
  std::memcpy(x, p, n * sizeof(T));
  K::scale_block(x, inv);
  std::memcpy(p, x, n * sizeof(T));
}

template <class V, class K>
void scale(void* pv, size_t n, int group) {
  using T = typename K::T;
  using Inv = typename K::Inv;
  constexpr size_t L = K::kLanes;
  auto* p = static_cast<T*>(pv);
  Inv inv = Inv{1} / static_cast<Inv>(group);
  size_t i = head_elems<V>(p, n);
  if (i != 0) scale_part<V, K>(p, i, inv);
  for (; i + 4 * L <= n; i += 4 * L) {
    K::scale_block(p + i, inv);
    K::scale_block(p + i + L, inv);
    K::scale_block(p + i + 2 * L, inv);
    K::scale_block(p + i + 3 * L, inv);
  }
  for (; i + L <= n; i += L) K::scale_block(p + i, inv);
  if (i < n) scale_part<V, K>(p + i, n - i, inv);
}

template <class V, class K, bool nt>
constexpr std::array<ReduceFn, kOps> row() {
  return {run<V, K, Op::kSum, nt>, run<V, K, Op::kProd, nt>, run<V, K, Op::kMin, nt>, run<V, K, Op::kMax, nt>};
}

template <class V, bool nt>
constexpr void fill(ReduceFn (&table)[kDataTypes][kOps]) {
  std::array<ReduceFn, kOps> rows[kDataTypes] = {
      row<V, Native<V, float>, nt>(),   row<V, Native<V, double>, nt>(), row<V, Native<V, int32_t>, nt>(),
      row<V, Native<V, int64_t>, nt>(), row<V, Native<V, uint8_t>, nt>(), row<V, F16<V>, nt>(),
      row<V, BF16<V>, nt>()};
  for (int t = 0; t < kDataTypes; ++t)
    for (int o = 0; o < kOps; ++o) table[t][o] = rows[t][static_cast<size_t>(o)];
}

/// The kernel table of V's instruction set.
template <class V>
constexpr Kernels make_kernels() {
  Kernels k{};
  fill<V, false>(k.reduce);
  fill<V, true>(k.reduce_streaming);
  k.scale[0] = scale<V, Native<V, float>>;
  k.scale[1] = scale<V, Native<V, double>>;
  k.scale[5] = scale<V, F16<V>>;
  k.scale[6] = scale<V, BF16<V>>;
  return k;
}

}  // namespace grex::detail::simd

#endif  // GREX_REDUCE_X86
