// SPDX-License-Identifier: Apache-2.0
// Element-wise reduction kernels used by the collectives.
//
// Floating point: f32 and f64 reduce natively. f16 (IEEE binary16) and bf16 are
// widened to f32, reduced there with the f32 operator, and rounded back to nearest
// even, element by element: the result is bit for bit what "convert both inputs to
// f32, apply the op in f32, round" gives, at every SIMD level. Min and max keep the
// first operand when either is NaN or both compare equal (x86 minps/maxps with the
// operands swapped, and `b < a ? b : a` in C++), so min(NaN, 1) is NaN and
// min(1, NaN) is 1; sums and products propagate NaN.
//
// NaN bits: every NaN that reduce() or scale_avg() writes is the canonical quiet
// NaN, positive with no payload (std::numeric_limits<T>::quiet_NaN(): f32
// 0x7fc00000, f64 0x7ff8000000000000, f16 0x7e00, bf16 0x7fc0), whatever the
// signs, payloads and quiet bits of the NaN inputs, and for NaNs the op makes
// (inf - inf, 0 * inf). So the bits are the same at every SIMD level, with
// cached or streaming stores, in place or not, in any build: x86 keeps the first
// operand's payload when both are NaN and the compiler may swap the operands of a
// commutative op, which would otherwise make them depend on register allocation.
// reduce_ref.h states all of it in plain C++.
// Integers wrap (two's complement); scale_avg divides them, truncating.
#pragma once

#include <grex/communicator.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace grex::detail {

/// dst[i] = a[i] op b[i] for count elements (dst may alias a or b).
/// kAvg reduces as kSum; call scale_avg() on the final result. A dst of at
/// least reduce_streaming_min_bytes() apart from a and b is written with
/// streaming stores, as memcpy writes one that large.
void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op) noexcept;
/// reduce() with streaming stores for dst whatever count is (dst apart from
/// a and b): for a result nobody reads again before it would leave the cache.
void reduce_streaming(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op) noexcept;
/// 3/4 of this core's share of the last-level cache (glibc's memcpy
/// threshold for non-temporal stores), at least 8 MiB.
size_t reduce_streaming_min_bytes() noexcept;
/// buf[i] *= 1/n (floats: the reciprocal rounded to f32 for f32, f16 and bf16,
/// to f64 for f64), buf[i] /= n (integers).
void scale_avg(void* buf, size_t count, DataType type, int n) noexcept;

/// Instruction sets the kernels exist for. kAvx2 needs AVX2, F16C and FMA;
/// kAvx512 needs AVX-512 F, BW, DQ and VL. Off x86-64 everything is kScalar.
enum class SimdLevel : uint8_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
/// The best level this CPU and OS support, detected once; reduce() and
/// scale_avg() run at it.
SimdLevel simd_level() noexcept;
/// "scalar", "avx2", "avx512".
std::string_view simd_level_name(SimdLevel level) noexcept;
/// reduce() and scale_avg() at a chosen level (streaming a large dst as
/// reduce() does), for tests and benchmarks; a level above simd_level() runs
/// at simd_level().
void reduce_at(SimdLevel level, void* dst, const void* a, const void* b, size_t count, DataType type,
               ReduceOp op) noexcept;
void scale_avg_at(SimdLevel level, void* buf, size_t count, DataType type, int n) noexcept;
/// reduce_at() with the streaming stores of a large dst whatever count is
/// (dst apart from a and b), for tests: the same bits as reduce_at().
void reduce_streaming_at(SimdLevel level, void* dst, const void* a, const void* b, size_t count, DataType type,
                         ReduceOp op) noexcept;

/// The scalar conversions the kScalar kernels use; they match x86 F16C bit for
/// bit: subnormals kept, round to nearest even, overflow to infinity, NaN made
/// quiet with the top payload bits kept.
float f16_to_f32(uint16_t h) noexcept;
uint16_t f32_to_f16(float f) noexcept;
/// bf16 is the top half of an f32: widening is a shift; narrowing rounds to
/// nearest even (overflowing to infinity) and keeps NaN quiet.
float bf16_to_f32(uint16_t h) noexcept;
uint16_t f32_to_bf16(float f) noexcept;

}  // namespace grex::detail
