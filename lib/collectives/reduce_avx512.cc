// SPDX-License-Identifier: Apache-2.0
// AVX-512 (F, BW, DQ, VL) reduction kernels (see reduce.cc for the design). Compiled in a
// region for that instruction set; used only when simd_level() allows it.
#include <type_traits>

#include "collectives/reduce_simd.h"

#if GREX_REDUCE_X86

namespace grex::detail::simd {

// ------------------------------------------------------------------- AVX-512

GREX_TARGET_BEGIN("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c,fma")
namespace avx512 {

constexpr size_t kVecBytes = 64;

template <Op op>
inline __m512 fop(__m512 x, __m512 y) {
  if constexpr (op == Op::kSum) return _mm512_add_ps(x, y);
  else if constexpr (op == Op::kProd) return _mm512_mul_ps(x, y);
  else if constexpr (op == Op::kMin) return _mm512_min_ps(y, x);  // y < x ? y : x
  else return _mm512_max_ps(y, x);  // x < y ? y : x
}
template <Op op>
inline __m512d fop(__m512d x, __m512d y) {
  if constexpr (op == Op::kSum) return _mm512_add_pd(x, y);
  else if constexpr (op == Op::kProd) return _mm512_mul_pd(x, y);
  else if constexpr (op == Op::kMin) return _mm512_min_pd(y, x);
  else return _mm512_max_pd(y, x);
}
template <Op op, class T>
inline __m512i iop(__m512i x, __m512i y) {
  if constexpr (std::is_same_v<T, int32_t>) {
    if constexpr (op == Op::kSum) return _mm512_add_epi32(x, y);
    else if constexpr (op == Op::kProd) return _mm512_mullo_epi32(x, y);
    else if constexpr (op == Op::kMin) return _mm512_min_epi32(x, y);
    else return _mm512_max_epi32(x, y);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    if constexpr (op == Op::kSum) return _mm512_add_epi64(x, y);
    else if constexpr (op == Op::kProd) return _mm512_mullo_epi64(x, y);
    else if constexpr (op == Op::kMin) return _mm512_min_epi64(x, y);
    else return _mm512_max_epi64(x, y);
  } else {
    static_assert(std::is_same_v<T, uint8_t>);
    if constexpr (op == Op::kSum) return _mm512_add_epi8(x, y);
    else if constexpr (op == Op::kProd) {
      __m512i even = _mm512_mullo_epi16(x, y);
      __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(x, 8), _mm512_srli_epi16(y, 8));
      return _mm512_or_si512(_mm512_and_si512(even, _mm512_set1_epi16(0xff)), _mm512_slli_epi16(odd, 8));
    }
    else if constexpr (op == Op::kMin) return _mm512_min_epu8(x, y);
    else return _mm512_max_epu8(x, y);
  }
}

// Ordinary or streaming (nt) stores; a streaming one needs dst aligned to its size.
template <bool nt>
inline void put(float* d, __m512 v) {
  if constexpr (nt) _mm512_stream_ps(d, v);
  else _mm512_storeu_ps(d, v);
}
template <bool nt>
inline void put(double* d, __m512d v) {
  if constexpr (nt) _mm512_stream_pd(d, v);
  else _mm512_storeu_pd(d, v);
}
template <bool nt>
inline void put(void* d, __m512i v) {
  if constexpr (nt) _mm512_stream_si512(static_cast<__m512i*>(d), v);
  else _mm512_storeu_si512(d, v);
}
template <bool nt>
inline void put(void* d, __m256i v) {
  if constexpr (nt) _mm256_stream_si256(static_cast<__m256i*>(d), v);
  else _mm256_storeu_si256(static_cast<__m256i*>(d), v);
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
      put<nt>(d, fop<op>(_mm512_loadu_ps(a), _mm512_loadu_ps(b)));
    } else if constexpr (std::is_same_v<E, double>) {
      put<nt>(d, fop<op>(_mm512_loadu_pd(a), _mm512_loadu_pd(b)));
    } else {
      put<nt>(static_cast<void*>(d), iop<op, E>(_mm512_loadu_si512(a), _mm512_loadu_si512(b)));
    }
  }
  static void scale_block(T* p, Inv inv) {
    if constexpr (std::is_same_v<E, float>) _mm512_storeu_ps(p, _mm512_mul_ps(_mm512_loadu_ps(p), _mm512_set1_ps(inv)));
    if constexpr (std::is_same_v<E, double>) _mm512_storeu_pd(p, _mm512_mul_pd(_mm512_loadu_pd(p), _mm512_set1_pd(inv)));
  }
};

// f16: 32 per step, widened 16 at a time.
struct F16 {
  using T = uint16_t;
  using Inv = float;
  static constexpr size_t kLanes = 32;
  static constexpr bool kPrefetch = true;
  static __m512 load(const T* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  template <bool nt = false>
  static void store(T* p, __m512 v) {
    put<nt>(static_cast<void*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  template <Op op, bool nt = false>
  static void block(T* d, const T* a, const T* b) {
    __m512 lo = fop<op>(load(a), load(b));
    __m512 hi = fop<op>(load(a + 16), load(b + 16));
    store<nt>(d, lo);
    store<nt>(d + 16, hi);
  }
  static void scale_block(T* p, float inv) {
    __m512 v = _mm512_set1_ps(inv);
    __m512 lo = _mm512_mul_ps(load(p), v);
    __m512 hi = _mm512_mul_ps(load(p + 16), v);
    store(p, lo);
    store(p + 16, hi);
  }
};

// bf16: 32 per step, even elements in the low halves of the 32-bit lanes.
struct BF16 {
  using T = uint16_t;
  using Inv = float;
  static constexpr size_t kLanes = 32;
  static constexpr bool kPrefetch = true;
  static __m512i top_half() { return _mm512_set1_epi32(static_cast<int>(0xffff0000u)); }
  static __m512 even(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
  static __m512 odd(__m512i v) { return _mm512_castsi512_ps(_mm512_and_si512(v, top_half())); }
  static __m512i round(__m512 x) {
    __m512i u = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    return _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), u, _mm512_set1_epi32(0x00400000));
  }
  static __m512i pack(__m512 ev, __m512 od) {
    return _mm512_or_si512(_mm512_srli_epi32(round(ev), 16), _mm512_and_si512(round(od), top_half()));
  }
  template <Op op, bool nt = false>
  static void block(T* d, const T* a, const T* b) {
    __m512i x = _mm512_loadu_si512(a);
    __m512i y = _mm512_loadu_si512(b);
    put<nt>(static_cast<void*>(d), pack(fop<op>(even(x), even(y)), fop<op>(odd(x), odd(y))));
  }
  static void scale_block(T* p, float inv) {
    __m512 v = _mm512_set1_ps(inv);
    __m512i x = _mm512_loadu_si512(p);
    _mm512_storeu_si512(p, pack(_mm512_mul_ps(even(x), v), _mm512_mul_ps(odd(x), v)));
  }
};

GREX_DEFINE_DRIVER()

}  // namespace avx512
GREX_TARGET_END

const Kernels kAvx512Kernels = avx512::kKernels;

}  // namespace grex::detail::simd

#endif  // GREX_REDUCE_X86
