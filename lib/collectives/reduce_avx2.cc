// SPDX-License-Identifier: Apache-2.0
// AVX2 + F16C reduction kernels (see reduce.cc for the design). Compiled in a
// region for that instruction set; used only when simd_level() allows it.
#include <type_traits>

#include "collectives/reduce_simd.h"

#if GREX_REDUCE_X86

namespace grex::detail::simd {

// ---------------------------------------------------------------------- AVX2

GREX_TARGET_BEGIN("avx2,f16c,fma")
namespace avx2 {

constexpr size_t kVecBytes = 32;

template <Op op>
inline __m256 fop(__m256 x, __m256 y) {
  if constexpr (op == Op::kSum) return _mm256_add_ps(x, y);
  else if constexpr (op == Op::kProd) return _mm256_mul_ps(x, y);
  else if constexpr (op == Op::kMin) return _mm256_min_ps(y, x);  // y < x ? y : x
  else return _mm256_max_ps(y, x);  // x < y ? y : x
}
template <Op op>
inline __m256d fop(__m256d x, __m256d y) {
  if constexpr (op == Op::kSum) return _mm256_add_pd(x, y);
  else if constexpr (op == Op::kProd) return _mm256_mul_pd(x, y);
  else if constexpr (op == Op::kMin) return _mm256_min_pd(y, x);
  else return _mm256_max_pd(y, x);
}
template <Op op, class T>
inline __m256i iop(__m256i x, __m256i y) {
  if constexpr (std::is_same_v<T, int32_t>) {
    if constexpr (op == Op::kSum) return _mm256_add_epi32(x, y);
    else if constexpr (op == Op::kProd) return _mm256_mullo_epi32(x, y);
    else if constexpr (op == Op::kMin) return _mm256_min_epi32(x, y);
    else return _mm256_max_epi32(x, y);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    if constexpr (op == Op::kSum) return _mm256_add_epi64(x, y);
    else if constexpr (op == Op::kProd) {  // low 64 bits: xl*yl + ((xh*yl + xl*yh) << 32)
      __m256i lo = _mm256_mul_epu32(x, y);
      __m256i c1 = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), y);
      __m256i c2 = _mm256_mul_epu32(x, _mm256_srli_epi64(y, 32));
      return _mm256_add_epi64(lo, _mm256_slli_epi64(_mm256_add_epi64(c1, c2), 32));
    }
    else if constexpr (op == Op::kMin) return _mm256_blendv_epi8(x, y, _mm256_cmpgt_epi64(x, y));
    else return _mm256_blendv_epi8(x, y, _mm256_cmpgt_epi64(y, x));
  } else {
    static_assert(std::is_same_v<T, uint8_t>);
    if constexpr (op == Op::kSum) return _mm256_add_epi8(x, y);
    else if constexpr (op == Op::kProd) {  // bytes multiply as 16-bit lanes: even bytes, then odd ones
      __m256i even = _mm256_mullo_epi16(x, y);
      __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(x, 8), _mm256_srli_epi16(y, 8));
      return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0xff)), _mm256_slli_epi16(odd, 8));
    }
    else if constexpr (op == Op::kMin) return _mm256_min_epu8(x, y);
    else return _mm256_max_epu8(x, y);
  }
}

// Ordinary or streaming (nt) stores; a streaming one needs dst aligned to its size.
template <bool nt>
inline void put(float* d, __m256 v) {
  if constexpr (nt) _mm256_stream_ps(d, v);
  else _mm256_storeu_ps(d, v);
}
template <bool nt>
inline void put(double* d, __m256d v) {
  if constexpr (nt) _mm256_stream_pd(d, v);
  else _mm256_storeu_pd(d, v);
}
template <bool nt>
inline void put(void* d, __m256i v) {
  if constexpr (nt) _mm256_stream_si256(static_cast<__m256i*>(d), v);
  else _mm256_storeu_si256(static_cast<__m256i*>(d), v);
}
template <bool nt>
inline void put(void* d, __m128i v) {
  if constexpr (nt) _mm_stream_si128(static_cast<__m128i*>(d), v);
  else _mm_storeu_si128(static_cast<__m128i*>(d), v);
}

template <class E>
struct Native {
  using T = E;
  using Inv = std::conditional_t<std::is_same_v<E, double>, double, float>;
  static constexpr size_t kLanes = kVecBytes / sizeof(E);
  static constexpr bool kPrefetch = false;
  template <Op op, bool nt = false>
  static void block(T* d, const T* a, const T* b) {
    if constexpr (std::is_same_v<E, float>) {
      put<nt>(d, fop<op>(_mm256_loadu_ps(a), _mm256_loadu_ps(b)));
    } else if constexpr (std::is_same_v<E, double>) {
      put<nt>(d, fop<op>(_mm256_loadu_pd(a), _mm256_loadu_pd(b)));
    } else {
      __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
      __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
      put<nt>(static_cast<void*>(d), iop<op, E>(x, y));
    }
  }
  static void scale_block(T* p, Inv inv) {
    if constexpr (std::is_same_v<E, float>) _mm256_storeu_ps(p, _mm256_mul_ps(_mm256_loadu_ps(p), _mm256_set1_ps(inv)));
    if constexpr (std::is_same_v<E, double>) _mm256_storeu_pd(p, _mm256_mul_pd(_mm256_loadu_pd(p), _mm256_set1_pd(inv)));
  }
};

// f16: 16 per step, widened 8 at a time by F16C.
struct F16 {
  using T = uint16_t;
  using Inv = float;
  static constexpr size_t kLanes = 16;
  static constexpr bool kPrefetch = true;
  static __m256 load(const T* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  template <bool nt = false>
  static void store(T* p, __m256 v) {
    put<nt>(static_cast<void*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  template <Op op, bool nt = false>
  static void block(T* d, const T* a, const T* b) {
    __m256 lo = fop<op>(load(a), load(b));
    __m256 hi = fop<op>(load(a + 8), load(b + 8));
    store<nt>(d, lo);
    store<nt>(d + 8, hi);
  }
  static void scale_block(T* p, float inv) {
    __m256 v = _mm256_set1_ps(inv);
    __m256 lo = _mm256_mul_ps(load(p), v);
    __m256 hi = _mm256_mul_ps(load(p + 8), v);
    store(p, lo);
    store(p + 8, hi);
  }
};

// bf16: 16 per step; in each 32-bit lane the even element is the low half
// (widened by a left shift) and the odd one the high half (widened by a mask).
struct BF16 {
  using T = uint16_t;
  using Inv = float;
  static constexpr size_t kLanes = 16;
  static constexpr bool kPrefetch = true;
  static __m256i top_half() { return _mm256_set1_epi32(static_cast<int>(0xffff0000u)); }
  static __m256 even(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
  static __m256 odd(__m256i v) { return _mm256_castsi256_ps(_mm256_and_si256(v, top_half())); }
  // The rounded bf16 in the top half of each lane (the low half is junk).
  static __m256i round(__m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    return _mm256_blendv_epi8(r, quiet, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
  }
  static __m256i pack(__m256 ev, __m256 od) {
    return _mm256_or_si256(_mm256_srli_epi32(round(ev), 16), _mm256_and_si256(round(od), top_half()));
  }
  template <Op op, bool nt = false>
  static void block(T* d, const T* a, const T* b) {
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
    __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    put<nt>(static_cast<void*>(d), pack(fop<op>(even(x), even(y)), fop<op>(odd(x), odd(y))));
  }
  static void scale_block(T* p, float inv) {
    __m256 v = _mm256_set1_ps(inv);
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), pack(_mm256_mul_ps(even(x), v), _mm256_mul_ps(odd(x), v)));
  }
};

GREX_DEFINE_DRIVER()

}  // namespace avx2
GREX_TARGET_END

const Kernels kAvx2Kernels = avx2::kKernels;

}  // namespace grex::detail::simd

#endif  // GREX_REDUCE_X86
