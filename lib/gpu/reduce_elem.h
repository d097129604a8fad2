// SPDX-License-Identifier: Apache-2.0
// The element arithmetic of every reduction, written once for the host and,
// under nvcc, for the device: the f16 and bf16 conversions, the four ops and
// the canonical NaN. The CPU's scalar kernels (lib/collectives/reduce.cc) are
// these functions in a loop, and the AVX2 / AVX-512 kernels are held to them
// bit for bit (tests/unit/reduce_elem_test.cc), so a GPU kernel built from the
// same functions gives the bits the CPU gives for every dtype and op.
//
// Rules (the x86 F16C instructions' behaviour, which the SIMD kernels use):
//   f16 -> f32   exact; subnormals kept; a NaN made quiet, its payload kept
//   f32 -> f16   round to nearest even; >= 65520 to infinity; a NaN made quiet
//   bf16 -> f32  a 16-bit shift
//   f32 -> bf16  round to nearest even (add 0x7fff plus the lowest kept bit); NaN quiet
//   ops          sum, prod (integers wrap), min, max (x < y ? y : x: the second
//                operand when they compare unordered or equal, as the SIMD min/max)
//   canonical    every NaN result becomes the positive quiet NaN (0x7fc00000,
//                0x7ff8000000000000), whatever path made it
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define GREX_HD __host__ __device__ inline
#else
#define GREX_HD inline
#endif

namespace grex::elem {

/// The reduction ops, in ReduceOp's order (sum, prod, min, max).
enum class Op : int { kSum = 0, kProd = 1, kMin = 2, kMax = 3 };

GREX_HD uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
GREX_HD float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
GREX_HD int clz32(uint32_t x) {  // x != 0
#if defined(__CUDA_ARCH__)
  return __clz(static_cast<int>(x));
#else
  return __builtin_clz(x);
#endif
}

GREX_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);  // inf, or NaN made quiet
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    u = sign;
  } else {  // subnormal mant * 2^-24: normalise so the leading one sits at bit 10
    const int shift = clz32(mant) - 21;
    mant <<= shift;
    u = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((mant & 0x3ffu) << 13);
  }
  return from_bits(u);
}

GREX_HD uint16_t f32_to_f16(float f) {
  const uint32_t u = bits(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to infinity
  if (a >= 0x38800000u) {  // normal f16: rebias the exponent, round 13 bits off to nearest even
    uint32_t r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  const uint32_t e = a >> 23;
  if (e < 102) return sign;  // below 2^-25: rounds to zero
  // Subnormal f16: q = |f| * 2^24 = m >> (126 - e), rounded to nearest even
  // (q may round up to 0x400, the smallest normal, which encodes correctly).
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t s = 126 - e;
  uint32_t q = m >> s;
  const uint32_t rem = m & ((1u << s) - 1);
  const uint32_t half = 1u << (s - 1);
  if (rem > half || (rem == half && (q & 1u) != 0)) ++q;
  return static_cast<uint16_t>(sign | q);
}

GREX_HD float bf16_to_f32(uint16_t h) { return from_bits(static_cast<uint32_t>(h) << 16); }

GREX_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

template <Op op, class T>
GREX_HD T apply(T x, T y) {
  if constexpr (std::is_integral_v<T> && (op == Op::kSum || op == Op::kProd)) {
    using U = std::make_unsigned_t<T>;  // wraps, no signed-overflow UB
    return op == Op::kSum ? static_cast<T>(static_cast<U>(x) + static_cast<U>(y))
                          : static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
  } else if constexpr (op == Op::kSum) {
    return x + y;
  } else if constexpr (op == Op::kProd) {
    return x * y;
  } else if constexpr (op == Op::kMin) {
    return y < x ? y : x;
  } else {
    return x < y ? y : x;
  }
}

/// The canonical quiet NaN for any NaN; every other value as it is.
template <class T>
GREX_HD T canonical(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return x != x ? from_bits(0x7fc00000u) : x;
  } else if constexpr (std::is_same_v<T, double>) {
    if (x == x) return x;
    const uint64_t q = 0x7ff8000000000000ull;
    double d;
    memcpy(&d, &q, sizeof d);
    return d;
  } else {
    return x;
  }
}

/// One element of a reduction of T (float, double or an integer type).
template <Op op, class T>
GREX_HD T reduce_one(T x, T y) {
  return canonical(apply<op>(x, y));
}

/// One f16 (Widen = f16_to_f32, Narrow = f32_to_f16) or bf16 element: the
/// op on f32, the canonical NaN, then rounded back.
template <Op op>
GREX_HD uint16_t reduce_f16(uint16_t x, uint16_t y) {
  return f32_to_f16(canonical(apply<op>(f16_to_f32(x), f16_to_f32(y))));
}
template <Op op>
GREX_HD uint16_t reduce_bf16(uint16_t x, uint16_t y) {
  return f32_to_bf16(canonical(apply<op>(bf16_to_f32(x), bf16_to_f32(y))));
}

}  // namespace grex::elem
