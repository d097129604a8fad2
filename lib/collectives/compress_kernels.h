// SPDX-License-Identifier: Apache-2.0
// The float32 <-> 16-bit conversions of the compressed allreduce
// (compressed_allreduce.cc): round to nearest even as gpu/reduce_elem.h
// does, bit for bit, in a scalar form, an AVX2 + F16C form and an AVX-512
// form chosen by simd_level(); the *_at forms pick a level, for tests.
#pragma once

#include <grex/communicator.h>

#include <cstddef>
#include <cstdint>

#include "collectives/reduce.h"

namespace grex::detail {

/// w[i] = narrow(v[i]); with `res`, also res[i] += (v[i] - widen(w[i])) * scale;
/// with `back`, also back[i] = widen(w[i]) (back may be v: one pass where a
/// rank keeps the value it sends).
void narrow_f32(Compression kind, const float* v, size_t m, uint16_t* w, float* res, float scale,
                float* back = nullptr) noexcept;
/// out[i] = a[i] (+ b[i] where b) + widen(h[i]); out may be a; without a, widen(h[i]).
void widen_add(Compression kind, const uint16_t* h, size_t m, const float* a, const float* b, float* out) noexcept;
/// out[i] = widen(h[i]).
void widen(Compression kind, const uint16_t* h, size_t m, float* out) noexcept;

/// int8 blocks of kInt8Block values: [float32 scale][int8 x k], scale = the
/// block's largest magnitude / 127, value = q * scale, q rounded to nearest
/// even and clamped to +-127 (finite inputs). m values from a block start;
/// a last block may be shorter. With `res`: res[i] += (v[i] - q * scale) * s;
/// with `back`: back[i] = q * scale (back may be v).
inline constexpr size_t kInt8Block = 256;
/// Bytes that m values take in int8 blocks (a last, shorter block: its scale and values).
inline constexpr size_t int8_bytes(size_t m) noexcept {
  return m / kInt8Block * (kInt8Block + 4) + (m % kInt8Block != 0 ? 4 + m % kInt8Block : 0);
}
void int8_narrow(const float* v, size_t m, uint8_t* w, float* res, float s, float* back = nullptr) noexcept;
/// out[i] = a[i] (+ b[i] where b) + value(i); out may be a.
void int8_widen_add(const uint8_t* w, size_t m, const float* a, const float* b, float* out) noexcept;
void int8_widen(const uint8_t* w, size_t m, float* out) noexcept;
void int8_narrow_at(SimdLevel level, const float* v, size_t m, uint8_t* w, float* res, float s,
                    float* back = nullptr) noexcept;
void int8_widen_add_at(SimdLevel level, const uint8_t* w, size_t m, const float* a, const float* b,
                       float* out) noexcept;

void narrow_f32_at(SimdLevel level, Compression kind, const float* v, size_t m, uint16_t* w, float* res,
                   float scale, float* back = nullptr) noexcept;
void widen_add_at(SimdLevel level, Compression kind, const uint16_t* h, size_t m, const float* a, const float* b,
                  float* out) noexcept;

}  // namespace grex::detail
