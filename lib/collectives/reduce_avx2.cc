// SPDX-License-Identifier: Apache-2.0
// The AVX2 + F16C + FMA vector traits of the reduction kernels (reduce_simd_kernels.h; see reduce.cc for the
// design), compiled in a region for that instruction set; used only when simd_level() allows it.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "collectives/reduce_simd.h"

#if GREX_REDUCE_X86

GREX_TARGET_BEGIN("avx2,f16c,fma")

namespace grex::detail::simd {

struct Avx2 {
  static constexpr size_t kVecBytes = 32;
  using F = __m256;
  using D = __m256d;
  using I = __m256i;
  using H = __m128i;

  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static D load(const double* p) { return _mm256_loadu_pd(p); }
  static I loadi(const void* p) { return _mm256_loadu_si256(static_cast<const I*>(p)); }
  static H loadh(const void* p) { return _mm_loadu_si128(static_cast<const H*>(p)); }
  template <bool nt>
  static void put(float* d, F v) {
    if constexpr (nt) _mm256_stream_ps(d, v);
    else _mm256_storeu_ps(d, v);
  }
  template <bool nt>
  static void put(double* d, D v) {
    if constexpr (nt) _mm256_stream_pd(d, v);
    else _mm256_storeu_pd(d, v);
  }
  template <bool nt>
  static void put(void* d, I v) {
    if constexpr (nt) _mm256_stream_si256(static_cast<I*>(d), v);
    else _mm256_storeu_si256(static_cast<I*>(d), v);
  }
  template <bool nt>
  static void put(void* d, H v) {
    if constexpr (nt) _mm_stream_si128(static_cast<H*>(d), v);
    else _mm_storeu_si128(static_cast<H*>(d), v);
  }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static D set1(double x) { return _mm256_set1_pd(x); }
  static I set1_epi32(int x) { return _mm256_set1_epi32(x); }

  static F add(F x, F y) { return _mm256_add_ps(x, y); }
  static D add(D x, D y) { return _mm256_add_pd(x, y); }
  static F mul(F x, F y) { return _mm256_mul_ps(x, y); }
  static D mul(D x, D y) { return _mm256_mul_pd(x, y); }
  static F min(F x, F y) { return _mm256_min_ps(x, y); }
  static D min(D x, D y) { return _mm256_min_pd(x, y); }
  static F max(F x, F y) { return _mm256_max_ps(x, y); }
  static D max(D x, D y) { return _mm256_max_pd(x, y); }
  static F canon(F x) {
    return _mm256_blendv_ps(x, set1(std::numeric_limits<float>::quiet_NaN()), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  static D canon(D x) {
    return _mm256_blendv_pd(x, set1(std::numeric_limits<double>::quiet_NaN()), _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
  }

  template <class E>
  static I iadd(I x, I y) {
    if constexpr (sizeof(E) == 1) return _mm256_add_epi8(x, y);
    else if constexpr (sizeof(E) == 4) return _mm256_add_epi32(x, y);
    else return _mm256_add_epi64(x, y);
  }
  template <class E>
  static I imul(I x, I y) {
    if constexpr (sizeof(E) == 1) {  // bytes multiply as 16-bit lanes: even bytes, then odd ones
      I even = _mm256_mullo_epi16(x, y);
      I odd = _mm256_mullo_epi16(_mm256_srli_epi16(x, 8), _mm256_srli_epi16(y, 8));
      return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0xff)), _mm256_slli_epi16(odd, 8));
    } else if constexpr (sizeof(E) == 4) {
      return _mm256_mullo_epi32(x, y);
    } else {  // low 64 bits: xl*yl + ((xh*yl + xl*yh) << 32)
      I lo = _mm256_mul_epu32(x, y);
      I c1 = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), y);
      I c2 = _mm256_mul_epu32(x, _mm256_srli_epi64(y, 32));
      return _mm256_add_epi64(lo, _mm256_slli_epi64(_mm256_add_epi64(c1, c2), 32));
    }
  }
  template <class E>
  static I imin(I x, I y) {
    if constexpr (sizeof(E) == 1) return _mm256_min_epu8(x, y);
    else if constexpr (sizeof(E) == 4) return _mm256_min_epi32(x, y);
    else return _mm256_blendv_epi8(x, y, _mm256_cmpgt_epi64(x, y));
  }
  template <class E>
  static I imax(I x, I y) {
    if constexpr (sizeof(E) == 1) return _mm256_max_epu8(x, y);
    else if constexpr (sizeof(E) == 4) return _mm256_max_epi32(x, y);
    else return _mm256_blendv_epi8(x, y, _mm256_cmpgt_epi64(y, x));
  }

  static F cvtph(H h) { return _mm256_cvtph_ps(h); }
  static H cvtps(F x) { return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT); }
  static F as_f(I v) { return _mm256_castsi256_ps(v); }
  static I as_i(F v) { return _mm256_castps_si256(v); }
  static I and_i(I x, I y) { return _mm256_and_si256(x, y); }
  static I or_i(I x, I y) { return _mm256_or_si256(x, y); }
  static I add32(I x, I y) { return _mm256_add_epi32(x, y); }
  static I shl16(I v) { return _mm256_slli_epi32(v, 16); }
  static I shr16(I v) { return _mm256_srli_epi32(v, 16); }
};

}  // namespace grex::detail::simd

#include "collectives/reduce_simd_kernels.h"

namespace grex::detail::simd {

const Kernels kAvx2Kernels = make_kernels<Avx2>();

}  // namespace grex::detail::simd

GREX_TARGET_END

#endif  // GREX_REDUCE_X86
