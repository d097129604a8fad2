// SPDX-License-Identifier: Apache-2.0
#include "collectives/compress_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "collectives/reduce_simd.h"
#include "gpu/reduce_elem.h"

// No fused multiply-adds in this file: every form rounds a product before it
// adds it, as the scalar form on a CPU without FMA does, so that the forms
// give the same bits. Where a function is compiled for AVX-512 (which has
// FMA), the compiler would otherwise fuse x * d + a, in the scalar tails it
// inlines and in the vector arithmetic alike.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace grex::detail {
namespace {

inline uint16_t narrow1(Compression k, float f) noexcept {
  return k == Compression::kBf16 ? elem::f32_to_bf16(f) : elem::f32_to_f16(f);
}
inline float widen1(Compression k, uint16_t h) noexcept {
  return k == Compression::kBf16 ? elem::bf16_to_f32(h) : elem::f16_to_f32(h);
}

void narrow_scalar(Compression k, const float* v, size_t m, uint16_t* w, float* res, float scale,
                   float* back) noexcept {
  for (size_t i = 0; i < m; ++i) {
    const float x = v[i];
    w[i] = narrow1(k, x);
    if (res != nullptr) res[i] += (x - widen1(k, w[i])) * scale;
    if (back != nullptr) back[i] = widen1(k, w[i]);
  }
}

// out[i] = a[i] (+ b[i] where b) + widened h[i]; without a, the widened value alone.
void widen_add_scalar(Compression k, const uint16_t* h, size_t m, const float* a, const float* b, float* out) noexcept {
  for (size_t i = 0; i < m; ++i) {
    const float x = widen1(k, h[i]);
    out[i] = a == nullptr ? x : (b != nullptr ? a[i] + b[i] : a[i]) + x;
  }
}

// One int8 block's values [from, to): v, res, back, a, b and out point at
// the block's first value, q at its first int8 (after the scale d). The
// scalar forms run whole blocks through these, the vector forms their tails.
void int8_quantize(const float* v, float* res, float* back, size_t from, size_t to, float d, float inv,
                   float scale, uint8_t* q) noexcept {
  for (size_t i = from; i < to; ++i) {
    const float f = v[i];
    const long x = std::clamp(std::lrintf(f * inv), -127L, 127L);
    q[i] = static_cast<uint8_t>(static_cast<int8_t>(x));
    if (res != nullptr) res[i] += (f - static_cast<float>(x) * d) * scale;
    if (back != nullptr) back[i] = static_cast<float>(x) * d;
  }
}

void int8_dequantize(const uint8_t* q, size_t from, size_t to, float d, const float* a, const float* b,
                     float* out) noexcept {
  for (size_t i = from; i < to; ++i) {
    const float x = static_cast<float>(static_cast<int8_t>(q[i])) * d;
    out[i] = a == nullptr ? x : (b != nullptr ? a[i] + b[i] : a[i]) + x;
  }
}

// A block's scale d and its inverse from its largest magnitude.
inline void int8_scale(float amax, float& d, float& inv) noexcept {
  d = amax / 127.f;
  inv = amax > 0.f ? 127.f / amax : 0.f;
}

void int8_narrow_scalar(const float* v, size_t m, uint8_t* w, float* res, float scale, float* back) noexcept {
  for (size_t b = 0; b < m; b += kInt8Block) {
    const size_t k = std::min(kInt8Block, m - b);
    float amax = 0.f;
    for (size_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(v[b + i]));
    float d, inv;
    int8_scale(amax, d, inv);
    uint8_t* blk = w + (b / kInt8Block) * (kInt8Block + 4);
    std::memcpy(blk, &d, 4);
    int8_quantize(v + b, res != nullptr ? res + b : nullptr, back != nullptr ? back + b : nullptr, 0, k, d, inv,
                  scale, blk + 4);
  }
}

void int8_widen_add_scalar(const uint8_t* w, size_t m, const float* a, const float* bb, float* out) noexcept {
  for (size_t b = 0; b < m; b += kInt8Block) {
    const uint8_t* blk = w + (b / kInt8Block) * (kInt8Block + 4);
    float d;
    std::memcpy(&d, blk, 4);
    int8_dequantize(blk + 4, 0, std::min(kInt8Block, m - b), d, a != nullptr ? a + b : nullptr,
                    bb != nullptr ? bb + b : nullptr, out + b);
  }
}

}  // namespace

#if GREX_REDUCE_X86
namespace {
// The int8 forms read their float32 inputs (v, res, a, b) a block at a time
// and first ask for the block kAheadBytes further on: on a vector larger
// than the cache, the hardware prefetchers alone left the rounding (two
// passes over each 1 KiB block, the second from L1) waiting on memory, at
// 9-12 GB/s on 64 MiB against 19-20 GB/s with the lines asked for 8 KiB
// ahead. The 16-bit forms, one pass, lost 5 % in the allreduce with the same
// prefetches (docs/benchmarks.md), and have none.
constexpr size_t kAheadBytes = 8192;
// Every line of one int8 block (256 values) of p, kAheadBytes on.
[[gnu::always_inline]] inline void fetch_block_ahead(const float* p) noexcept {
  if (p == nullptr) return;
  for (size_t l = 0; l < kInt8Block; l += 16)
    _mm_prefetch(reinterpret_cast<const char*>(p + l) + kAheadBytes, _MM_HINT_T0);
}
}  // namespace

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

void narrow_avx2(Compression k, const float* v, size_t m, uint16_t* w, float* res, float scale,
                 float* back) noexcept {
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
    if (back != nullptr) _mm256_storeu_ps(back + i, widen8(k, h));
  }
  narrow_scalar(k, v + i, m - i, w + i, res != nullptr ? res + i : nullptr, scale,
                back != nullptr ? back + i : nullptr);
}

void widen_add_avx2(Compression k, const uint16_t* h, size_t m, const float* a, const float* b, float* out) noexcept {
  size_t i = 0;
  for (; i + 8 <= m; i += 8) {
    const __m256 x = widen8(k, _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)));
    if (a == nullptr) {
      _mm256_storeu_ps(out + i, x);
      continue;
    }
    __m256 base = _mm256_loadu_ps(a + i);
    if (b != nullptr) base = _mm256_add_ps(base, _mm256_loadu_ps(b + i));
    _mm256_storeu_ps(out + i, _mm256_add_ps(base, x));
  }
  widen_add_scalar(k, h + i, m - i, a != nullptr ? a + i : nullptr, b != nullptr ? b + i : nullptr, out + i);
}

// int8: 8 values at a time; the same arithmetic as the scalar form, in its
// order (cvtps rounds to nearest even, as lrintf does in the default mode).
void int8_narrow_avx2(const float* v, size_t m, uint8_t* w, float* res, float scale, float* back) noexcept {
  const __m256 sign = _mm256_set1_ps(-0.f), s = _mm256_set1_ps(scale);
  for (size_t b = 0; b < m; b += kInt8Block) {
    const size_t k = std::min(kInt8Block, m - b);
    const size_t k8 = k / 8 * 8;
    fetch_block_ahead(v + b);
    if (res != nullptr) fetch_block_ahead(res + b);
    // Four running maxima (as the AVX-512 form): one chain waits on each max.
    __m256 mx[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    size_t i4 = 0;
    for (; i4 + 32 <= k8; i4 += 32)
      for (int j = 0; j < 4; ++j)
        mx[j] = _mm256_max_ps(mx[j], _mm256_andnot_ps(sign, _mm256_loadu_ps(v + b + i4 + 8 * j)));
    for (size_t i = i4; i < k8; i += 8) mx[0] = _mm256_max_ps(mx[0], _mm256_andnot_ps(sign, _mm256_loadu_ps(v + b + i)));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(_mm256_max_ps(mx[0], mx[1]), _mm256_max_ps(mx[2], mx[3])));
    float amax = 0.f;
    for (float x : lanes) amax = std::max(amax, x);
    for (size_t i = k8; i < k; ++i) amax = std::max(amax, std::fabs(v[b + i]));
    float d, inv;
    int8_scale(amax, d, inv);
    uint8_t* blk = w + (b / kInt8Block) * (kInt8Block + 4);
    std::memcpy(blk, &d, 4);
    const __m256 vinv = _mm256_set1_ps(inv), vd = _mm256_set1_ps(d);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    for (size_t i = 0; i < k8; i += 8) {
      const __m256 x = _mm256_loadu_ps(v + b + i);
      __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(x, vinv));
      q = _mm256_min_epi32(_mm256_max_epi32(q, lo), hi);
      // 8 int32 to 8 int8: pack to 16 then 8 bits (saturating, values fit), lanes in order.
      const __m256i p16 = _mm256_packs_epi32(q, q);
      const __m256i p8 = _mm256_packs_epi16(p16, p16);
      const __m256i ord = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
      const uint64_t bytes = static_cast<uint64_t>(_mm256_extract_epi64(ord, 0));
      std::memcpy(blk + 4 + i, &bytes, 8);
      const __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(q), vd);
      if (res != nullptr)
        _mm256_storeu_ps(res + b + i, _mm256_add_ps(_mm256_loadu_ps(res + b + i), _mm256_mul_ps(_mm256_sub_ps(x, y), s)));
      if (back != nullptr) _mm256_storeu_ps(back + b + i, y);
    }
    int8_quantize(v + b, res != nullptr ? res + b : nullptr, back != nullptr ? back + b : nullptr, k8, k, d, inv,
                  scale, blk + 4);
  }
}

void int8_widen_add_avx2(const uint8_t* w, size_t m, const float* a, const float* bb, float* out) noexcept {
  for (size_t b = 0; b < m; b += kInt8Block) {
    const size_t k = std::min(kInt8Block, m - b);
    const size_t k8 = k / 8 * 8;
    const uint8_t* blk = w + (b / kInt8Block) * (kInt8Block + 4);
    if (a != nullptr) {
      fetch_block_ahead(a + b);
      if (bb != nullptr) fetch_block_ahead(bb + b);
    }
    float d;
    std::memcpy(&d, blk, 4);
    const __m256 vd = _mm256_set1_ps(d);
    for (size_t i = 0; i < k8; i += 8) {
      uint64_t bytes;
      std::memcpy(&bytes, blk + 4 + i, 8);
      const __m256 x = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(static_cast<long long>(bytes)))), vd);
      if (a == nullptr) {
        _mm256_storeu_ps(out + b + i, x);
      } else {
        __m256 base = _mm256_loadu_ps(a + b + i);
        if (bb != nullptr) base = _mm256_add_ps(base, _mm256_loadu_ps(bb + b + i));
        _mm256_storeu_ps(out + b + i, _mm256_add_ps(base, x));
      }
    }
    int8_dequantize(blk + 4, k8, k, d, a != nullptr ? a + b : nullptr, bb != nullptr ? bb + b : nullptr, out + b);
  }
}

}  // namespace
GREX_TARGET_END

// The AVX-512 forms: 16 values at a time, the same arithmetic in the same
// order as the scalar and AVX2 forms (no FMA, which would round once where
// they round twice), so all three give the same bits.
GREX_TARGET_BEGIN("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")
namespace {

inline __m256i narrow16(Compression k, __m512 x) noexcept {
  if (k == Compression::kFp16) return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, nan);
  return _mm512_cvtepi32_epi16(r);  // every lane is below 2^16
}

inline __m512 widen16(Compression k, __m256i h) noexcept {
  if (k == Compression::kFp16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

void narrow_avx512(Compression k, const float* v, size_t m, uint16_t* w, float* res, float scale,
                   float* back) noexcept {
  size_t i = 0;
  const __m512 s = _mm512_set1_ps(scale);
  for (; i + 16 <= m; i += 16) {
    const __m512 x = _mm512_loadu_ps(v + i);
    const __m256i h = narrow16(k, x);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + i), h);
    if (res != nullptr || back != nullptr) {
      const __m512 y = widen16(k, h);
      if (res != nullptr)
        _mm512_storeu_ps(res + i, _mm512_add_ps(_mm512_loadu_ps(res + i), _mm512_mul_ps(_mm512_sub_ps(x, y), s)));
      if (back != nullptr) _mm512_storeu_ps(back + i, y);
    }
  }
  narrow_scalar(k, v + i, m - i, w + i, res != nullptr ? res + i : nullptr, scale,
                back != nullptr ? back + i : nullptr);
}

void int8_narrow_avx512(const float* v, size_t m, uint8_t* w, float* res, float scale, float* back) noexcept {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (size_t b = 0; b < m; b += kInt8Block) {
    const size_t k = std::min(kInt8Block, m - b);
    const size_t k16 = k / 16 * 16;
    const float* x0 = v + b;
    fetch_block_ahead(x0);
    if (res != nullptr) fetch_block_ahead(res + b);
    // Four running maxima, not one: each max waits on the one before it
    // (4 cycles), and one chain made this pass most of the block's time.
    // The largest magnitude is the same in any order.
    __m512 mx[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    size_t i4 = 0;
    for (; i4 + 64 <= k16; i4 += 64)
      for (int j = 0; j < 4; ++j) mx[j] = _mm512_max_ps(mx[j], _mm512_abs_ps(_mm512_loadu_ps(x0 + i4 + 16 * j)));
    for (size_t i = i4; i < k16; i += 16) mx[0] = _mm512_max_ps(mx[0], _mm512_abs_ps(_mm512_loadu_ps(x0 + i)));
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(mx[0], mx[1]), _mm512_max_ps(mx[2], mx[3])));
    for (size_t i = k16; i < k; ++i) amax = std::max(amax, std::fabs(x0[i]));
    float d, inv;
    int8_scale(amax, d, inv);
    uint8_t* blk = w + (b / kInt8Block) * (kInt8Block + 4);
    std::memcpy(blk, &d, 4);
    const __m512 vinv = _mm512_set1_ps(inv), vd = _mm512_set1_ps(d);
    for (size_t i = 0; i < k16; i += 16) {
      const __m512 x = _mm512_loadu_ps(x0 + i);
      const __m512i q = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x, vinv)), lo), hi);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + 4 + i), _mm512_cvtepi32_epi8(q));
      if (res != nullptr || back != nullptr) {
        const __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(q), vd);
        if (res != nullptr)
          _mm512_storeu_ps(res + b + i,
                           _mm512_add_ps(_mm512_loadu_ps(res + b + i), _mm512_mul_ps(_mm512_sub_ps(x, y), s)));
        if (back != nullptr) _mm512_storeu_ps(back + b + i, y);
      }
    }
    int8_quantize(x0, res != nullptr ? res + b : nullptr, back != nullptr ? back + b : nullptr, k16, k, d, inv,
                  scale, blk + 4);
  }
}

void int8_widen_add_avx512(const uint8_t* w, size_t m, const float* a, const float* bb, float* out) noexcept {
  for (size_t b = 0; b < m; b += kInt8Block) {
    const size_t k = std::min(kInt8Block, m - b);
    const size_t k16 = k / 16 * 16;
    const uint8_t* blk = w + (b / kInt8Block) * (kInt8Block + 4);
    if (a != nullptr) {
      fetch_block_ahead(a + b);
      if (bb != nullptr) fetch_block_ahead(bb + b);
    }
    float d;
    std::memcpy(&d, blk, 4);
    const __m512 vd = _mm512_set1_ps(d);
    for (size_t i = 0; i < k16; i += 16) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4 + i));
      const __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), vd);
      if (a == nullptr) {
        _mm512_storeu_ps(out + b + i, x);
        continue;
      }
      __m512 base = _mm512_loadu_ps(a + b + i);
      if (bb != nullptr) base = _mm512_add_ps(base, _mm512_loadu_ps(bb + b + i));
      _mm512_storeu_ps(out + b + i, _mm512_add_ps(base, x));
    }
    int8_dequantize(blk + 4, k16, k, d, a != nullptr ? a + b : nullptr, bb != nullptr ? bb + b : nullptr, out + b);
  }
}

}  // namespace
GREX_TARGET_END
#endif

namespace {
// The level a kernel runs at: the one asked for, at most what this CPU has.
inline SimdLevel run_level(SimdLevel asked) noexcept { return std::min(asked, simd_level()); }
}  // namespace

void int8_narrow_at(SimdLevel level, const float* v, size_t m, uint8_t* w, float* res, float s,
                    float* back) noexcept {
#if GREX_REDUCE_X86
  switch (run_level(level)) {
    case SimdLevel::kAvx512: return int8_narrow_avx512(v, m, w, res, s, back);
    case SimdLevel::kAvx2: return int8_narrow_avx2(v, m, w, res, s, back);
    case SimdLevel::kScalar: break;
  }
#endif
  (void)level;
  int8_narrow_scalar(v, m, w, res, s, back);
}

void int8_widen_add_at(SimdLevel level, const uint8_t* w, size_t m, const float* a, const float* b,
                       float* out) noexcept {
#if GREX_REDUCE_X86
  switch (run_level(level)) {
    case SimdLevel::kAvx512: return int8_widen_add_avx512(w, m, a, b, out);
    case SimdLevel::kAvx2: return int8_widen_add_avx2(w, m, a, b, out);
    case SimdLevel::kScalar: break;
  }
#endif
  (void)level;
  int8_widen_add_scalar(w, m, a, b, out);
}

void int8_narrow(const float* v, size_t m, uint8_t* w, float* res, float s, float* back) noexcept {
  int8_narrow_at(simd_level(), v, m, w, res, s, back);
}
void int8_widen_add(const uint8_t* w, size_t m, const float* a, const float* b, float* out) noexcept {
  int8_widen_add_at(simd_level(), w, m, a, b, out);
}
void int8_widen(const uint8_t* w, size_t m, float* out) noexcept { int8_widen_add(w, m, nullptr, nullptr, out); }

void narrow_f32_at(SimdLevel level, Compression k, const float* v, size_t m, uint16_t* w, float* res,
                   float scale, float* back) noexcept {
#if GREX_REDUCE_X86
  switch (run_level(level)) {
    case SimdLevel::kAvx512: return narrow_avx512(k, v, m, w, res, scale, back);
    case SimdLevel::kAvx2: return narrow_avx2(k, v, m, w, res, scale, back);
    case SimdLevel::kScalar: break;
  }
#endif
  (void)level;
  narrow_scalar(k, v, m, w, res, scale, back);
}

void widen_add_at(SimdLevel level, Compression k, const uint16_t* h, size_t m, const float* a, const float* b,
                  float* out) noexcept {
#if GREX_REDUCE_X86
  // No AVX-512 form: widening 16 halves to a 512-bit register is a
  // lane-crossing conversion, and the AVX2 form was 7-14 % faster on an L2-held
  // chunk (bench/compress_bench.cc).
  if (run_level(level) != SimdLevel::kScalar) return widen_add_avx2(k, h, m, a, b, out);
#endif
  (void)level;
  widen_add_scalar(k, h, m, a, b, out);
}

void narrow_f32(Compression k, const float* v, size_t m, uint16_t* w, float* res, float scale, float* back) noexcept {
  narrow_f32_at(simd_level(), k, v, m, w, res, scale, back);
}

void widen_add(Compression k, const uint16_t* h, size_t m, const float* a, const float* b, float* out) noexcept {
  widen_add_at(simd_level(), k, h, m, a, b, out);
}

void widen(Compression k, const uint16_t* h, size_t m, float* out) noexcept {
  widen_add(k, h, m, nullptr, nullptr, out);
}

}  // namespace grex::detail
