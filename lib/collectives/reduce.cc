// SPDX-License-Identifier: Apache-2.0
// Reduction kernels.
//
// Three implementations of every (dtype, op), picked at run time once from what
// the CPU supports (simd_level()), so one binary runs on any x86-64:
//   avx512  explicit AVX-512 (F, BW, DQ, VL) intrinsics, 64-byte vectors;
//   avx2    explicit AVX2 + F16C intrinsics, 32-byte vectors;
//   scalar  plain loops (the compiler vectorises the native types with SSE2);
//           f16 and bf16 go element by element through f16_to_f32() and friends.
// The SIMD code sits in regions compiled for its instruction set (#pragma GCC
// target, or clang's attribute push), not in target_clones/ifunc, so it builds
// and runs under ASan and UBSan like any other code.
//
// f16 widens with vcvtph2ps and narrows with vcvtps2ph (round to nearest even);
// bf16 widens by a 16-bit shift and narrows by adding 0x7fff plus the lowest
// kept bit (NaN: keep the top half, set the quiet bit). Either way the op runs
// on f32 vectors with the same instruction the f32 kernel uses, and the scalar
// conversions match the hardware bit for bit (reduce_test checks all of it).
//
// Each SIMD kernel aligns dst to the vector size with a short first piece,
// then runs four vectors per iteration with ordinary (cached) stores: the
// reduced data is sent or reduced again soon, so non-temporal stores would only
// push it out to DRAM. Pieces shorter than a vector (head and tail) go through
// a vector-sized buffer on the stack, so they take exactly the same arithmetic.
#include "collectives/reduce.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GREX_REDUCE_X86 1
#include <cpuid.h>
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which
// -W(maybe-)uninitialized flags once inlined (GCC bug 105593, fixed in 13).
// Diagnostic pragmas go by source location: this silences the header only.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#else
#define GREX_REDUCE_X86 0
#endif

namespace grex::detail {

// ---------------------------------------------------------------- conversions

float f16_to_f32(uint16_t h) noexcept {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);  // inf, or NaN made quiet
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    u = sign;
  } else {  // subnormal mant * 2^-24: normalise so the leading one sits at bit 10
    int shift = std::countl_zero(mant) - 21;
    mant <<= shift;
    u = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(u);
}

uint16_t f32_to_f16(float f) noexcept {
  uint32_t u = std::bit_cast<uint32_t>(f);
  auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to infinity
  if (a >= 0x38800000u) {  // normal f16: rebias the exponent, round 13 bits off to nearest even
    uint32_t r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  uint32_t e = a >> 23;
  if (e < 102) return sign;  // below 2^-25: rounds to zero
  // Subnormal f16: q = |f| * 2^24 = m >> (126 - e), rounded to nearest even
  // (q may round up to 0x400, the smallest normal, which encodes correctly).
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  uint32_t s = 126 - e;
  uint32_t q = m >> s;
  uint32_t rem = m & ((1u << s) - 1);
  uint32_t half = 1u << (s - 1);
  if (rem > half || (rem == half && (q & 1u) != 0)) ++q;
  return static_cast<uint16_t>(sign | q);
}

float bf16_to_f32(uint16_t h) noexcept { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_bf16(float f) noexcept {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

namespace {

enum class Op : uint8_t { kSum = 0, kProd = 1, kMin = 2, kMax = 3 };
constexpr int kDataTypes = 7;  // DataType values 0..6
constexpr int kOps = 4;

using ReduceFn = void (*)(void* d, const void* a, const void* b, size_t n);
using ScaleFn = void (*)(void* p, size_t n, int group);

// The kernels of one SIMD level; null scale entries are integer types, which
// every level divides with the same scalar loop.
struct Kernels {
  ReduceFn reduce[kDataTypes][kOps];
  ScaleFn scale[kDataTypes];
};

// -------------------------------------------------------------------- scalar

namespace scalar {

template <Op op, class T>
inline T apply(T x, T y) {
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

template <class T, Op op>
void native(void* dv, const void* av, const void* bv, size_t n) {
  auto* d = static_cast<T*>(dv);
  const auto* a = static_cast<const T*>(av);
  const auto* b = static_cast<const T*>(bv);
  for (size_t i = 0; i < n; ++i) d[i] = apply<op>(a[i], b[i]);
}

template <float (*Widen)(uint16_t) noexcept, uint16_t (*Narrow)(float) noexcept, Op op>
void half(void* dv, const void* av, const void* bv, size_t n) {
  auto* d = static_cast<uint16_t*>(dv);
  const auto* a = static_cast<const uint16_t*>(av);
  const auto* b = static_cast<const uint16_t*>(bv);
  for (size_t i = 0; i < n; ++i) d[i] = Narrow(apply<op>(Widen(a[i]), Widen(b[i])));
}

template <class T>
void scale_native(void* pv, size_t n, int group) {
  auto* p = static_cast<T*>(pv);
  T inv = T{1} / static_cast<T>(group);
  for (size_t i = 0; i < n; ++i) p[i] *= inv;
}

template <float (*Widen)(uint16_t) noexcept, uint16_t (*Narrow)(float) noexcept>
void scale_half(void* pv, size_t n, int group) {
  auto* p = static_cast<uint16_t*>(pv);
  float inv = 1.0f / static_cast<float>(group);
  for (size_t i = 0; i < n; ++i) p[i] = Narrow(Widen(p[i]) * inv);
}

#define GREX_SCALAR_ROW(...) {__VA_ARGS__<Op::kSum>, __VA_ARGS__<Op::kProd>, __VA_ARGS__<Op::kMin>, __VA_ARGS__<Op::kMax>}
template <class T>
struct NativeRow {
  template <Op op>
  static void fn(void* d, const void* a, const void* b, size_t n) { native<T, op>(d, a, b, n); }
};
template <float (*W)(uint16_t) noexcept, uint16_t (*N)(float) noexcept>
struct HalfRow {
  template <Op op>
  static void fn(void* d, const void* a, const void* b, size_t n) { half<W, N, op>(d, a, b, n); }
};

constexpr Kernels kKernels = {
    {
        GREX_SCALAR_ROW(NativeRow<float>::fn),
        GREX_SCALAR_ROW(NativeRow<double>::fn),
        GREX_SCALAR_ROW(NativeRow<int32_t>::fn),
        GREX_SCALAR_ROW(NativeRow<int64_t>::fn),
        GREX_SCALAR_ROW(NativeRow<uint8_t>::fn),
        GREX_SCALAR_ROW(HalfRow<f16_to_f32, f32_to_f16>::template fn),
        GREX_SCALAR_ROW(HalfRow<bf16_to_f32, f32_to_bf16>::template fn),
    },
    {scale_native<float>, scale_native<double>, nullptr, nullptr, nullptr, scale_half<f16_to_f32, f32_to_f16>,
     scale_half<bf16_to_f32, f32_to_bf16>},
};

}  // namespace scalar

#if GREX_REDUCE_X86

// Compile a region of code for an instruction set (GCC and clang differ).
#define GREX_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define GREX_TARGET_BEGIN(isa) GREX_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define GREX_TARGET_END GREX_PRAGMA(clang attribute pop)
#else
#define GREX_TARGET_BEGIN(isa) GREX_PRAGMA(GCC push_options) GREX_PRAGMA(GCC target(isa))
#define GREX_TARGET_END GREX_PRAGMA(GCC pop_options)
#endif

// Software prefetch of a, b and dst (dst's lines are read for ownership by the
// stores anyway; asking early just overlaps it), for the kinds whose
// conversions take many instructions per cache line (f16, bf16), so that fewer
// lines are in flight within the out-of-order window: on large vectors the
// hardware prefetchers alone leave bf16 about 10% and f16 about 7% below f32
// (measured on Sapphire Rapids, one core, 256 MiB); with it both are within a
// few % of f32. The plain kinds gain nothing. Below kPrefetchMinBytes the data
// is mostly in cache and the prefetches would only cost issue slots.
constexpr size_t kPrefetchBytes = 1024;
constexpr size_t kPrefetchMinBytes = size_t{1} << 20;

// The SIMD driver, stamped into each instruction-set region: K is a "kind"
// (one per dtype) with T, kLanes elements per vector step, kPrefetch,
// block<op>(d, a, b) for one step, and for floating kinds scale_block(p, inv)
// (inv as K::Inv).
//   run:   the first piece up to dst's kVecBytes alignment, 4 steps per
//          iteration (prefetching 1 KiB ahead on large heavy kinds),
//          single steps, then the tail.
//   part:  fewer than kLanes elements through a stack buffer, so heads and
//          tails do exactly the arithmetic of the full steps.
#define GREX_DEFINE_DRIVER()                                                                           \
  template <class T>                                                                                   \
  inline size_t head_elems(const T* d, size_t n) {                                                     \
    auto addr = reinterpret_cast<uintptr_t>(d);                                                        \
    if (addr % sizeof(T) != 0) return 0;                                                               \
    return std::min(n, ((kVecBytes - addr % kVecBytes) % kVecBytes) / sizeof(T));                      \
  }                                                                                                    \
  template <class K, Op op>                                                                            \
  void part(typename K::T* d, const typename K::T* a, const typename K::T* b, size_t n) {              \
    using T = typename K::T;                                                                           \
    alignas(64) T x[K::kLanes] = {};                                                                   \
    alignas(64) T y[K::kLanes] = {};                                                                   \
    alignas(64) T z[K::kLanes];                                                                        \
    std::memcpy(x, a, n * sizeof(T));                                                                  \
    std::memcpy(y, b, n * sizeof(T));                                                                  \
    K::template block<op>(z, x, y);                                                                    \
    std::memcpy(d, z, n * sizeof(T));                                                                  \
  }                                                                                                    \
  template <class K, Op op>                                                                            \
  void run(void* dv, const void* av, const void* bv, size_t n) {                                       \
    using T = typename K::T;                                                                           \
    constexpr size_t L = K::kLanes;                                                                    \
    auto* d = static_cast<T*>(dv);                                                                     \
    const auto* a = static_cast<const T*>(av);                                                         \
    const auto* b = static_cast<const T*>(bv);                                                         \
    size_t i = head_elems(d, n);                                                                       \
    if (i != 0) part<K, op>(d, a, b, i);                                                               \
    if (K::kPrefetch && n * sizeof(T) >= kPrefetchMinBytes) {                                          \
      for (; i + 4 * L <= n; i += 4 * L) {                                                             \
        for (size_t k = 0; k < 4 * kVecBytes; k += 64) {                                               \
          _mm_prefetch(reinterpret_cast<const char*>(a + i) + kPrefetchBytes + k, _MM_HINT_T0);        \
          _mm_prefetch(reinterpret_cast<const char*>(b + i) + kPrefetchBytes + k, _MM_HINT_T0);        \
          _mm_prefetch(reinterpret_cast<const char*>(d + i) + kPrefetchBytes + k, _MM_HINT_T0);        \
        }                                                                                              \
        K::template block<op>(d + i, a + i, b + i);                                                    \
        K::template block<op>(d + i + L, a + i + L, b + i + L);                                        \
        K::template block<op>(d + i + 2 * L, a + i + 2 * L, b + i + 2 * L);                            \
        K::template block<op>(d + i + 3 * L, a + i + 3 * L, b + i + 3 * L);                            \
      }                                                                                                \
    }                                                                                                  \
    for (; i + 4 * L <= n; i += 4 * L) {                                                               \
      K::template block<op>(d + i, a + i, b + i);                                                      \
      K::template block<op>(d + i + L, a + i + L, b + i + L);                                          \
      K::template block<op>(d + i + 2 * L, a + i + 2 * L, b + i + 2 * L);                              \
      K::template block<op>(d + i + 3 * L, a + i + 3 * L, b + i + 3 * L);                              \
    }                                                                                                  \
    for (; i + L <= n; i += L) K::template block<op>(d + i, a + i, b + i);                             \
    if (i < n) part<K, op>(d + i, a + i, b + i, n - i);                                                \
  }                                                                                                    \
  template <class K>                                                                                   \
  void scale_part(typename K::T* p, size_t n, typename K::Inv inv) {                                   \
    using T = typename K::T;                                                                           \
    alignas(64) T x[K::kLanes] = {};                                                                   \
    std::memcpy(x, p, n * sizeof(T));                                                                  \
    K::scale_block(x, inv);                                                                            \
    std::memcpy(p, x, n * sizeof(T));                                                                  \
  }                                                                                                    \
  template <class K>                                                                                   \
  void scale(void* pv, size_t n, int group) {                                                          \
    using T = typename K::T;                                                                           \
    using Inv = typename K::Inv;                                                                       \
    constexpr size_t L = K::kLanes;                                                                    \
    auto* p = static_cast<T*>(pv);                                                                     \
    Inv inv = Inv{1} / static_cast<Inv>(group);                                                        \
    size_t i = head_elems(p, n);                                                                       \
    if (i != 0) scale_part<K>(p, i, inv);                                                              \
    for (; i + 4 * L <= n; i += 4 * L) {                                                               \
      K::scale_block(p + i, inv);                                                                      \
      K::scale_block(p + i + L, inv);                                                                  \
      K::scale_block(p + i + 2 * L, inv);                                                              \
      K::scale_block(p + i + 3 * L, inv);                                                              \
    }                                                                                                  \
    for (; i + L <= n; i += L) K::scale_block(p + i, inv);                                             \
    if (i < n) scale_part<K>(p + i, n - i, inv);                                                       \
  }                                                                                                    \
  template <class K>                                                                                   \
  constexpr auto row() {                                                                               \
    return std::array<ReduceFn, kOps>{run<K, Op::kSum>, run<K, Op::kProd>, run<K, Op::kMin>,           \
                                      run<K, Op::kMax>};                                               \
  }                                                                                                    \
  constexpr Kernels make_kernels() {                                                                   \
    std::array<ReduceFn, kOps> rows[kDataTypes] = {row<Native<float>>(),   row<Native<double>>(),      \
                                                   row<Native<int32_t>>(), row<Native<int64_t>>(),     \
                                                   row<Native<uint8_t>>(), row<F16>(),                 \
                                                   row<BF16>()};                                       \
    Kernels k{};                                                                                       \
    for (int t = 0; t < kDataTypes; ++t)                                                               \
      for (int o = 0; o < kOps; ++o) k.reduce[t][o] = rows[t][static_cast<size_t>(o)];                 \
    k.scale[0] = scale<Native<float>>;                                                                 \
    k.scale[1] = scale<Native<double>>;                                                                \
    k.scale[5] = scale<F16>;                                                                           \
    k.scale[6] = scale<BF16>;                                                                          \
    return k;                                                                                          \
  }                                                                                                    \
  constexpr Kernels kKernels = make_kernels();

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

template <class E>
struct Native {
  using T = E;
  using Inv = std::conditional_t<std::is_same_v<E, double>, double, float>;
  static constexpr size_t kLanes = kVecBytes / sizeof(E);
  static constexpr bool kPrefetch = false;
  template <Op op>
  static void block(T* d, const T* a, const T* b) {
    if constexpr (std::is_same_v<E, float>) {
      _mm256_storeu_ps(d, fop<op>(_mm256_loadu_ps(a), _mm256_loadu_ps(b)));
    } else if constexpr (std::is_same_v<E, double>) {
      _mm256_storeu_pd(d, fop<op>(_mm256_loadu_pd(a), _mm256_loadu_pd(b)));
    } else {
      __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
      __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), iop<op, E>(x, y));
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
  static void store(T* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  template <Op op>
  static void block(T* d, const T* a, const T* b) {
    __m256 lo = fop<op>(load(a), load(b));
    __m256 hi = fop<op>(load(a + 8), load(b + 8));
    store(d, lo);
    store(d + 8, hi);
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
  template <Op op>
  static void block(T* d, const T* a, const T* b) {
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
    __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), pack(fop<op>(even(x), even(y)), fop<op>(odd(x), odd(y))));
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

template <class E>
struct Native {
  using T = E;
  using Inv = std::conditional_t<std::is_same_v<E, double>, double, float>;
  static constexpr size_t kLanes = kVecBytes / sizeof(E);
  static constexpr bool kPrefetch = false;
  template <Op op>
  static void block(T* d, const T* a, const T* b) {
    if constexpr (std::is_same_v<E, float>) {
      _mm512_storeu_ps(d, fop<op>(_mm512_loadu_ps(a), _mm512_loadu_ps(b)));
    } else if constexpr (std::is_same_v<E, double>) {
      _mm512_storeu_pd(d, fop<op>(_mm512_loadu_pd(a), _mm512_loadu_pd(b)));
    } else {
      _mm512_storeu_si512(d, iop<op, E>(_mm512_loadu_si512(a), _mm512_loadu_si512(b)));
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
  static void store(T* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  template <Op op>
  static void block(T* d, const T* a, const T* b) {
    __m512 lo = fop<op>(load(a), load(b));
    __m512 hi = fop<op>(load(a + 16), load(b + 16));
    store(d, lo);
    store(d + 16, hi);
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
  template <Op op>
  static void block(T* d, const T* a, const T* b) {
    __m512i x = _mm512_loadu_si512(a);
    __m512i y = _mm512_loadu_si512(b);
    _mm512_storeu_si512(d, pack(fop<op>(even(x), even(y)), fop<op>(odd(x), odd(y))));
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

#endif  // GREX_REDUCE_X86

// CPUID feature bits plus the OS check (XCR0) that the vector registers are
// saved on context switch: what __builtin_cpu_supports does, spelled out
// because clang's builtin does not know "f16c".
SimdLevel detect_level() noexcept {
#if GREX_REDUCE_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return SimdLevel::kScalar;
  bool fma = (c & (1u << 12)) != 0, osxsave = (c & (1u << 27)) != 0, avx = (c & (1u << 28)) != 0,
       f16c = (c & (1u << 29)) != 0;
  if (!osxsave || !avx) return SimdLevel::kScalar;
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  bool ymm_state = (xcr0_lo & 0x06u) == 0x06u;  // SSE and AVX state
  bool zmm_state = (xcr0_lo & 0xe6u) == 0xe6u;  // plus opmask and both halves of zmm
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return SimdLevel::kScalar;
  bool avx2 = (b & (1u << 5)) != 0, avx512f = (b & (1u << 16)) != 0, avx512dq = (b & (1u << 17)) != 0,
       avx512bw = (b & (1u << 30)) != 0, avx512vl = (b & (1u << 31)) != 0;
  if (!ymm_state || !avx2 || !f16c || !fma) return SimdLevel::kScalar;
  if (zmm_state && avx512f && avx512bw && avx512dq && avx512vl) return SimdLevel::kAvx512;
  return SimdLevel::kAvx2;
#else
  return SimdLevel::kScalar;
#endif
}

const Kernels& kernels(SimdLevel level) noexcept {
  level = std::min(level, simd_level());
#if GREX_REDUCE_X86
  if (level == SimdLevel::kAvx512) return avx512::kKernels;
  if (level == SimdLevel::kAvx2) return avx2::kKernels;
#endif
  return scalar::kKernels;
}

template <class T>
void divide(void* pv, size_t n, int group) {
  auto* p = static_cast<T*>(pv);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / group);
}

}  // namespace

SimdLevel simd_level() noexcept {
  static const SimdLevel level = detect_level();
  return level;
}

std::string_view simd_level_name(SimdLevel level) noexcept {
  switch (level) {
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
  }
  return "?";
}

void reduce_at(SimdLevel level, void* dst, const void* a, const void* b, size_t count, DataType type,
               ReduceOp op) noexcept {
  auto t = static_cast<size_t>(type);
  auto o = op == ReduceOp::kAvg ? size_t{0} : static_cast<size_t>(op);
  if (t >= kDataTypes || o >= kOps || count == 0) return;
  kernels(level).reduce[t][o](dst, a, b, count);
}

void scale_avg_at(SimdLevel level, void* buf, size_t count, DataType type, int n) noexcept {
  if (count == 0) return;
  switch (type) {
    case DataType::kInt32: return divide<int32_t>(buf, count, n);
    case DataType::kInt64: return divide<int64_t>(buf, count, n);
    case DataType::kUint8: return divide<uint8_t>(buf, count, n);
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kFloat16:
    case DataType::kBFloat16: return kernels(level).scale[static_cast<size_t>(type)](buf, count, n);
  }
}

void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op) noexcept {
  reduce_at(simd_level(), dst, a, b, count, type, op);
}

void scale_avg(void* buf, size_t count, DataType type, int n) noexcept {
  scale_avg_at(simd_level(), buf, count, type, n);
}

}  // namespace grex::detail
