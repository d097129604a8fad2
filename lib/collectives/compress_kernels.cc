// SPDX-License-Identifier: Apache-2.0
#include "collectives/compress_kernels.h"

#include "collectives/reduce_simd.h"
#include "gpu/reduce_elem.h"

namespace grex::detail {
namespace {

inline uint16_t narrow1(Compression k, float f) noexcept {
  return k == Compression::kBf16 ? elem::f32_to_bf16(f) : elem::f32_to_f16(f);
}
inline float widen1(Compression k, uint16_t h) noexcept {
  return k == Compression::kBf16 ? elem::bf16_to_f32(h) : elem::f16_to_f32(h);
}

void narrow_scalar(Compression k, const float* v, size_t m, uint16_t* w, float* res, float scale) noexcept {
  for (size_t i = 0; i < m; ++i) {
    w[i] = narrow1(k, v[i]);
    if (res != nullptr) res[i] += (v[i] - widen1(k, w[i])) * scale;
  }
}

void widen_add_scalar(Compression k, const uint16_t* h, size_t m, const float* a, const float* b, float* out) noexcept {
  for (size_t i = 0; i < m; ++i) {
    const float base = b != nullptr ? a[i] + b[i] : a[i];
    out[i] = base + widen1(k, h[i]);
  }
}

}  // namespace

#if GREX_REDUCE_X86
GREX_TARGET_BEGIN("avx2,f16c")
namespace {

// 8 floats to 8 halves, nearest even; NaN stays NaN (made quiet), as the scalar forms.
inline __m128i narrow8(Compression k, __m256 x) noexcept {
  if (k == Compression::kFp16) return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(nan), is_nan));
  // 32-bit lanes hold values below 2^16: pack them, then put the halves in order.
  const __m256i packed = _mm256_packus_epi32(r, r);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

inline __m256 widen8(Compression k, __m128i h) noexcept {
  if (k == Compression::kFp16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

void narrow_avx2(Compression k, const float* v, size_t m, uint16_t* w, float* res, float scale) noexcept {
  size_t i = 0;
  const __m256 s = _mm256_set1_ps(scale);
  for (; i + 8 <= m; i += 8) {
    const __m256 x = _mm256_loadu_ps(v + i);
    const __m128i h = narrow8(k, x);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(w + i), h);
    if (res != nullptr) {
      // (x - widened) * scale, then added: the scalar form's two roundings, in its order.
      const __m256 e = _mm256_mul_ps(_mm256_sub_ps(x, widen8(k, h)), s);
      _mm256_storeu_ps(res + i, _mm256_add_ps(_mm256_loadu_ps(res + i), e));
    }
  }
  narrow_scalar(k, v + i, m - i, w + i, res != nullptr ? res + i : nullptr, scale);
}

void widen_avx2(Compression k, const uint16_t* h, size_t m, float* out) noexcept {
  size_t i = 0;
  for (; i + 8 <= m; i += 8)
    _mm256_storeu_ps(out + i, widen8(k, _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  for (; i < m; ++i) out[i] = widen1(k, h[i]);
}

void widen_add_avx2(Compression k, const uint16_t* h, size_t m, const float* a, const float* b, float* out) noexcept {
  size_t i = 0;
  for (; i + 8 <= m; i += 8) {
    __m256 base = _mm256_loadu_ps(a + i);
    if (b != nullptr) base = _mm256_add_ps(base, _mm256_loadu_ps(b + i));
    const __m256 x = widen8(k, _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)));
    _mm256_storeu_ps(out + i, _mm256_add_ps(base, x));
  }
  widen_add_scalar(k, h + i, m - i, a + i, b != nullptr ? b + i : nullptr, out + i);
}

}  // namespace
GREX_TARGET_END
#endif

void narrow_f32_at(SimdLevel level, Compression k, const float* v, size_t m, uint16_t* w, float* res,
                   float scale) noexcept {
#if GREX_REDUCE_X86
  if (level != SimdLevel::kScalar && simd_level() != SimdLevel::kScalar) return narrow_avx2(k, v, m, w, res, scale);
#endif
  (void)level;
  narrow_scalar(k, v, m, w, res, scale);
}

void widen_add_at(SimdLevel level, Compression k, const uint16_t* h, size_t m, const float* a, const float* b,
                  float* out) noexcept {
#if GREX_REDUCE_X86
  if (level != SimdLevel::kScalar && simd_level() != SimdLevel::kScalar) return widen_add_avx2(k, h, m, a, b, out);
#endif
  (void)level;
  widen_add_scalar(k, h, m, a, b, out);
}

void narrow_f32(Compression k, const float* v, size_t m, uint16_t* w, float* res, float scale) noexcept {
  narrow_f32_at(simd_level(), k, v, m, w, res, scale);
}

void widen_add(Compression k, const uint16_t* h, size_t m, const float* a, const float* b, float* out) noexcept {
  widen_add_at(simd_level(), k, h, m, a, b, out);
}

void widen(Compression k, const uint16_t* h, size_t m, float* out) noexcept {
#if GREX_REDUCE_X86
  if (simd_level() != SimdLevel::kScalar) return widen_avx2(k, h, m, out);
#endif
  for (size_t i = 0; i < m; ++i) out[i] = widen1(k, h[i]);
}

}  // namespace grex::detail
