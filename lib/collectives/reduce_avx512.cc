// SPDX-License-Identifier: Apache-2.0
// The AVX-512 (F, BW, DQ, VL) vector traits of the reduction kernels (reduce_simd_kernels.h; see reduce.cc for
// the design), compiled in a region for that instruction set; used only when simd_level() allows it.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "collectives/reduce_simd.h"

#if GREX_REDUCE_X86

GREX_TARGET_BEGIN("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c,fma")

namespace grex::detail::simd {

struct Avx512 {
  static constexpr size_t kVecBytes = 64;
  using F = __m512;
  using D = __m512d;
  using I = __m512i;
  using H = __m256i;

  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static D load(const double* p) { return _mm512_loadu_pd(p); }
  static I loadi(const void* p) { return _mm512_loadu_si512(p); }
  static H loadh(const void* p) { return _mm256_loadu_si256(static_cast<const H*>(p)); }
  template <bool nt>
  static void put(float* d, F v) {
    if constexpr (nt) _mm512_stream_ps(d, v);
    else _mm512_storeu_ps(d, v);
  }
  template <bool nt>
  static void put(double* d, D v) {
    if constexpr (nt) _mm512_stream_pd(d, v);
    else _mm512_storeu_pd(d, v);
  }
  template <bool nt>
  static void put(void* d, I v) {
    if constexpr (nt) _mm512_stream_si512(static_cast<I*>(d), v);
    else _mm512_storeu_si512(d, v);
  }
  template <bool nt>
  static void put(void* d, H v) {
    if constexpr (nt) _mm256_stream_si256(static_cast<H*>(d), v);
    else _mm256_storeu_si256(static_cast<H*>(d), v);
  }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static D set1(double x) { return _mm512_set1_pd(x); }
  static I set1_epi32(int x) { return _mm512_set1_epi32(x); }

  static F add(F x, F y) { return _mm512_add_ps(x, y); }
  static D add(D x, D y) { return _mm512_add_pd(x, y); }
  static F mul(F x, F y) { return _mm512_mul_ps(x, y); }
  static D mul(D x, D y) { return _mm512_mul_pd(x, y); }
  static F min(F x, F y) { return _mm512_min_ps(x, y); }
  static D min(D x, D y) { return _mm512_min_pd(x, y); }
  static F max(F x, F y) { return _mm512_max_ps(x, y); }
  static D max(D x, D y) { return _mm512_max_pd(x, y); }
  // vfixupimm: by the class of each lane of x, the table answers "keep the first operand" (0) for quiet and
  // signalling NaNs, "x" (1) for zero, one, infinities and other values: one port-0 instruction, where a compare
  // into a mask would compete with f16's conversions for port 5.
  static constexpr int kNanToFirst = 0x11111100;
  static F canon(F x) {
    return _mm512_fixupimm_ps(set1(std::numeric_limits<float>::quiet_NaN()), x, _mm512_set1_epi32(kNanToFirst), 0);
  }
  static D canon(D x) {
    return _mm512_fixupimm_pd(set1(std::numeric_limits<double>::quiet_NaN()), x, _mm512_set1_epi64(kNanToFirst), 0);
  }

  template <class E>
  static I iadd(I x, I y) {
    if constexpr (sizeof(E) == 1) return _mm512_add_epi8(x, y);
    else if constexpr (sizeof(E) == 4) return _mm512_add_epi32(x, y);
    else return _mm512_add_epi64(x, y);
  }
  template <class E>
  static I imul(I x, I y) {
    if constexpr (sizeof(E) == 1) {  // bytes multiply as 16-bit lanes: even bytes, then odd ones
      I even = _mm512_mullo_epi16(x, y);
      I odd = _mm512_mullo_epi16(_mm512_srli_epi16(x, 8), _mm512_srli_epi16(y, 8));
      return _mm512_or_si512(_mm512_and_si512(even, _mm512_set1_epi16(0xff)), _mm512_slli_epi16(odd, 8));
    }
    else if constexpr (sizeof(E) == 4) return _mm512_mullo_epi32(x, y);
    else return _mm512_mullo_epi64(x, y);
  }
  template <class E>
  static I imin(I x, I y) {
    if constexpr (sizeof(E) == 1) return _mm512_min_epu8(x, y);
    else if constexpr (sizeof(E) == 4) return _mm512_min_epi32(x, y);
    else return _mm512_min_epi64(x, y);
  }
  template <class E>
  static I imax(I x, I y) {
    if constexpr (sizeof(E) == 1) return _mm512_max_epu8(x, y);
    else if constexpr (sizeof(E) == 4) return _mm512_max_epi32(x, y);
    else return _mm512_max_epi64(x, y);
  }

  static F cvtph(H h) { return _mm512_cvtph_ps(h); }
  static H cvtps(F x) { return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT); }
  static F as_f(I v) { return _mm512_castsi512_ps(v); }
  static I as_i(F v) { return _mm512_castps_si512(v); }
  static I and_i(I x, I y) { return _mm512_and_si512(x, y); }
  static I or_i(I x, I y) { return _mm512_or_si512(x, y); }
  static I add32(I x, I y) { return _mm512_add_epi32(x, y); }
  static I shl16(I v) { return _mm512_slli_epi32(v, 16); }
  static I shr16(I v) { return _mm512_srli_epi32(v, 16); }
};

}  // namespace grex::detail::simd

#include "collectives/reduce_simd_kernels.h"

namespace grex::detail::simd {

const Kernels kAvx512Kernels = make_kernels<Avx512>();

}  // namespace grex::detail::simd

GREX_TARGET_END

#endif  // GREX_REDUCE_X86
