// SPDX-License-Identifier: Apache-2.0
// Reduction kernels against scalar references: every dtype x op (avg through
// scale_avg) at every SIMD level this CPU has, on odd lengths, unaligned
// pointers and in place; f16/bf16 conversions against independent references
// and against the F16C instructions; special values (signed zeros, infinities,
// NaNs, subnormals, overflow).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/reduce.h"
#include "collectives/reduce_ref.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace grex::detail {
namespace {

constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
constexpr size_t kCounts[] = {0, 1, 7, 15, 16, 17, 1000003};

std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> out;
  for (int l = 0; l <= static_cast<int>(simd_level()); ++l) out.push_back(static_cast<SimdLevel>(l));
  return out;
}

// ------------------------------------------------ reference conversions
// Written from the definitions with double arithmetic, independent of the
// bit tricks in reduce.cc. NaN: quiet bit set, top payload bits kept.

float ref_f16_to_f32(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) {
    if (mant == 0) return sign ? -INFINITY : INFINITY;
    return std::bit_cast<float>((uint32_t(sign) << 31) | 0x7fc00000u | (uint32_t(mant) << 13));
  }
  double v = exp == 0 ? std::ldexp(double(mant), -24) : std::ldexp(double(1024 + mant), exp - 25);
  return static_cast<float>(sign ? -v : v);
}

uint16_t ref_f32_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  auto sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00 | ((u >> 13) & 0x3ff));
  double ax = std::fabs(double(f));
  if (ax >= 65520.0) return sign | 0x7c00;  // halfway between 65504 and 2^16 goes up (even)
  int e = 0;
  std::frexp(ax, &e);  // ax in [2^(e-1), 2^e)
  double quantum = ax < 0x1p-14 ? 0x1p-24 : std::ldexp(1.0, e - 1 - 10);
  double r = std::nearbyint(ax / quantum) * quantum;  // ties to even
  if (r < 0x1p-14) return static_cast<uint16_t>(sign | static_cast<uint16_t>(r / 0x1p-24));
  std::frexp(r, &e);
  auto mant = static_cast<uint16_t>((r / std::ldexp(1.0, e - 1) - 1.0) * 1024.0);
  return static_cast<uint16_t>(sign | ((e - 1 + 15) << 10) | mant);
}

float ref_bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

uint16_t ref_f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  double ax = std::fabs(double(f));
  if (ax == 0.0) return static_cast<uint16_t>(u >> 16);
  int e = 0;
  std::frexp(ax, &e);
  double quantum = ax < 0x1p-126 ? 0x1p-133 : std::ldexp(1.0, e - 1 - 7);  // 8 significant bits
  double r = std::nearbyint(ax / quantum) * quantum;
  float rf = static_cast<float>(u >> 31 ? -r : r);  // exact, or infinity past the largest bf16
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(rf) >> 16);
}

// ------------------------------------------------------- per-dtype traits

template <class F, class Bits>
F random_float(std::mt19937_64& g) {
  // A quarter raw bit patterns (every class: NaN, inf, subnormal, huge), the
  // rest ordinary values of mixed magnitude whose sums round.
  if (g() % 4 == 0) return std::bit_cast<F>(static_cast<Bits>(g()));
  std::uniform_real_distribution<F> mant(-2, 2);
  return std::ldexp(mant(g), static_cast<int>(g() % 24) - 12);
}

struct F32 {
  using T = float;
  static constexpr DataType kType = DataType::kFloat32;
  static T random(std::mt19937_64& g) { return random_float<float, uint32_t>(g); }
  static T op(ReduceOp op, T a, T b) { return reduce_ref(op, a, b); }
  static T avg(T s, int n) { return scale_avg_ref(s, n); }
  static bool is_nan(T x) { return std::isnan(x); }
  static uint64_t bits(T x) { return std::bit_cast<uint32_t>(x); }
};
struct F64 {
  using T = double;
  static constexpr DataType kType = DataType::kFloat64;
  static T random(std::mt19937_64& g) { return random_float<double, uint64_t>(g); }
  static T op(ReduceOp op, T a, T b) { return reduce_ref(op, a, b); }
  static T avg(T s, int n) { return scale_avg_ref(s, n); }
  static bool is_nan(T x) { return std::isnan(x); }
  static uint64_t bits(T x) { return std::bit_cast<uint64_t>(x); }
};
template <class I, DataType DT>
struct Int {
  using T = I;
  static constexpr DataType kType = DT;
  static T random(std::mt19937_64& g) { return static_cast<T>(g()); }
  static T op(ReduceOp op, T a, T b) { return reduce_ref(op, a, b); }
  static T avg(T s, int n) { return scale_avg_ref(s, n); }
  static bool is_nan(T) { return false; }
  static uint64_t bits(T x) { return static_cast<uint64_t>(x); }
};
using I32 = Int<int32_t, DataType::kInt32>;
using I64 = Int<int64_t, DataType::kInt64>;
using U8 = Int<uint8_t, DataType::kUint8>;

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), DataType DT>
struct Half {
  using T = uint16_t;
  static constexpr DataType kType = DT;
  static T random(std::mt19937_64& g) {
    if (g() % 4 == 0) return static_cast<T>(g());
    std::uniform_real_distribution<float> v(-8, 8);
    return Narrow(v(g));
  }
  // Convert both to f32, apply the op in f32, round to nearest even.
  static T op(ReduceOp op, T a, T b) { return Narrow(reduce_ref(op, Widen(a), Widen(b))); }
  static T avg(T s, int n) { return Narrow(scale_avg_ref(Widen(s), n)); }
  static bool is_nan(T x) { return std::isnan(Widen(x)); }
  static uint64_t bits(T x) { return x; }
};
using F16 = Half<ref_f16_to_f32, ref_f32_to_f16, DataType::kFloat16>;
using BF16 = Half<ref_bf16_to_f32, ref_f32_to_bf16, DataType::kBFloat16>;

// Bit-exact, NaNs included: every NaN result is the canonical one (reduce.h).
template <class Tr>
::testing::AssertionResult same(typename Tr::T got, typename Tr::T want, typename Tr::T a, typename Tr::T b) {
  if (Tr::bits(got) == Tr::bits(want)) return ::testing::AssertionSuccess();
  std::ostringstream msg;  // AssertionResult's << would not keep std::hex from one value to the next
  msg << std::hex << "got 0x" << Tr::bits(got) << " want 0x" << Tr::bits(want) << " (a 0x" << Tr::bits(a) << ", b 0x"
      << Tr::bits(b) << ")";
  return ::testing::AssertionFailure() << msg.str();
}

std::string where(SimdLevel level, ReduceOp op, size_t n, size_t i, const char* how) {
  return std::string(simd_level_name(level)) + " " + std::string(reduce_op_name(op)) + " n=" + std::to_string(n) +
         " i=" + std::to_string(i) + " " + how;
}

// reduce_at(level) on a and b into a separate dst, into a (dst == a) and into
// b (dst == b), and reduce_streaming_at into a separate dst, against the
// reference; for kAvg also scale_avg_at.
template <class Tr>
void check_level(SimdLevel level, ReduceOp op, const std::vector<typename Tr::T>& a,
                 const std::vector<typename Tr::T>& b, const std::vector<typename Tr::T>& want, size_t n) {
  using T = typename Tr::T;
  std::vector<T> d(n + 1, T{}), streamed(n + 1, T{}), in_a = a, in_b = b;
  reduce_at(level, d.data(), a.data(), b.data(), n, Tr::kType, op);
  reduce_at(level, in_a.data(), in_a.data(), b.data(), n, Tr::kType, op);
  reduce_at(level, in_b.data(), a.data(), in_b.data(), n, Tr::kType, op);
  reduce_streaming_at(level, streamed.data(), a.data(), b.data(), n, Tr::kType, op);
  // Equal bits are equal bytes: compare whole arrays first (fast in a debug build), then find what differs.
  auto same_bytes = [n](const std::vector<T>& x, const std::vector<T>& y) {
    return n == 0 || std::memcmp(x.data(), y.data(), n * sizeof(T)) == 0;
  };
  const bool all_same = same_bytes(d, want) && same_bytes(in_a, want) && same_bytes(in_b, want) &&
                        same_bytes(streamed, want);
  for (size_t i = 0; i < n && !all_same; ++i) {
    ASSERT_TRUE(same<Tr>(d[i], want[i], a[i], b[i])) << where(level, op, n, i, "dst");
    ASSERT_TRUE(same<Tr>(in_a[i], want[i], a[i], b[i])) << where(level, op, n, i, "dst==a");
    ASSERT_TRUE(same<Tr>(in_b[i], want[i], a[i], b[i])) << where(level, op, n, i, "dst==b");
    ASSERT_EQ(Tr::bits(streamed[i]), Tr::bits(d[i])) << where(level, op, n, i, "streamed");
  }
  ASSERT_EQ(Tr::bits(d[n]), Tr::bits(T{})) << "wrote past the end " << where(level, op, n, n, "");
  ASSERT_EQ(Tr::bits(streamed[n]), Tr::bits(T{})) << "streamed past the end " << where(level, op, n, n, "");
  if (op != ReduceOp::kAvg) return;
  for (int group : {3, 8}) {
    std::vector<T> s = d;
    scale_avg_at(level, s.data(), n, Tr::kType, group);
    std::vector<T> s_want(n);
    for (size_t i = 0; i < n; ++i) s_want[i] = Tr::avg(d[i], group);
    const bool scaled_same = same_bytes(s, s_want);
    for (size_t i = 0; i < n && !scaled_same; ++i)
      ASSERT_EQ(Tr::bits(s[i]), Tr::bits(s_want[i])) << where(level, op, n, i, "scale_avg") << " /" << group;
    ASSERT_EQ(Tr::bits(s[n]), Tr::bits(T{})) << "scale_avg wrote past the end";
  }
}

// Every op and count at every level, on pointers offset by 0 and 1 element
// from the allocation (so both the aligned loop and the head piece run).
template <class Tr>
void check_random() {
  using T = typename Tr::T;
  std::mt19937_64 g(0x5eed0000u + static_cast<unsigned>(Tr::kType));
  for (size_t n : kCounts) {
    for (size_t off : {size_t{0}, size_t{1}}) {
      std::vector<T> a(n + off), b(n + off);
      for (auto& x : a) x = Tr::random(g);
      for (auto& x : b) x = Tr::random(g);
      std::vector<T> a0(a.begin() + static_cast<ptrdiff_t>(off), a.end());
      std::vector<T> b0(b.begin() + static_cast<ptrdiff_t>(off), b.end());
      for (ReduceOp op : kAllOps) {
        std::vector<T> want(n);
        for (size_t i = 0; i < n; ++i) want[i] = Tr::op(op, a0[i], b0[i]);
        for (SimdLevel level : levels()) {
          SCOPED_TRACE(std::string(dtype_name(Tr::kType)) + " off=" + std::to_string(off));
          check_level<Tr>(level, op, a0, b0, want, n);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(Reduce, SimdLevel) {
  std::printf("simd_level: %s\n", std::string(simd_level_name(simd_level())).c_str());
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) {
    EXPECT_GE(simd_level(), SimdLevel::kAvx2);
  }
#endif
  // reduce() runs at simd_level().
  std::vector<float> a = {1, 2, 3}, b = {4, 5, 6}, d(3), e(3);
  reduce(d.data(), a.data(), b.data(), 3, DataType::kFloat32, ReduceOp::kSum);
  reduce_at(simd_level(), e.data(), a.data(), b.data(), 3, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(d, e);
  EXPECT_EQ(d, (std::vector<float>{5, 7, 9}));
}

TEST(Reduce, Float32) { check_random<F32>(); }
TEST(Reduce, Float64) { check_random<F64>(); }
TEST(Reduce, Int32) { check_random<I32>(); }
TEST(Reduce, Int64) { check_random<I64>(); }
TEST(Reduce, Uint8) { check_random<U8>(); }
TEST(Reduce, Float16) { check_random<F16>(); }
TEST(Reduce, BFloat16) { check_random<BF16>(); }

// A dst whose address is not a multiple of the element size cannot be
// vector-aligned: the streaming kernels must fall back to ordinary stores
// (a streaming store there would fault) and give the same bytes.
TEST(Reduce, StreamingToAMisalignedDstFallsBack) {
  const size_t n = 4099;
  std::vector<float> a(n), b(n), want(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i) * 0.5f;
    b[i] = 1.0f / static_cast<float>(i + 1);
    want[i] = a[i] + b[i];
  }
  std::vector<uint8_t> raw(n * sizeof(float) + 64, 0xee);
  for (SimdLevel level : levels())
    for (size_t shift : {1, 2, 3, 4, 12}) {
      std::fill(raw.begin(), raw.end(), 0xee);
      reduce_streaming_at(level, raw.data() + shift, a.data(), b.data(), n, DataType::kFloat32, ReduceOp::kSum);
      for (size_t i = 0; i < raw.size(); ++i) {
        uint8_t expect = 0xee;
        if (i >= shift && i < shift + n * sizeof(float)) {
          const size_t k = (i - shift) / sizeof(float);
          expect = reinterpret_cast<const uint8_t*>(&want[k])[(i - shift) % sizeof(float)];
        }
        ASSERT_EQ(raw[i], expect) << simd_level_name(level) << " shift " << shift << " byte " << i;
      }
    }
}

// reduce() streams a dst from reduce_streaming_min_bytes() on: one call that
// large (out of place and in place) gives the reference, and nothing past it.
TEST(Reduce, CallsPastTheStreamingSizeAreExact) {
  const size_t bytes = reduce_streaming_min_bytes() + 4096 + 4;
  ASSERT_GE(bytes, size_t{8} << 20);
  if (bytes > (size_t{1} << 30))
    GTEST_SKIP() << "this core's share of the last-level cache is over 1 GiB: too slow a test";
  const size_t n = bytes / sizeof(int32_t);
  std::vector<int32_t> a(n), b(n), d(n + 1, 7);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<int32_t>(i * 2654435761u);
    b[i] = static_cast<int32_t>(i ^ 0x5a5a5a5au);
  }
  reduce(d.data(), a.data(), b.data(), n, DataType::kInt32, ReduceOp::kMax);
  std::vector<int32_t> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = std::max(a[i], b[i]);
  const bool all_same = std::memcmp(d.data(), want.data(), n * sizeof(int32_t)) == 0;  // fast in a debug build
  for (size_t i = 0; i < n && !all_same; ++i) ASSERT_EQ(d[i], want[i]) << "at " << i;
  ASSERT_EQ(d[n], 7) << "wrote past the end";
  reduce(a.data(), a.data(), b.data(), n, DataType::kInt32, ReduceOp::kMax);
  ASSERT_EQ(std::memcmp(a.data(), d.data(), n * sizeof(int32_t)), 0) << "in place differs";
}

TEST(Reduce, Uint8Wraps) {
  uint8_t a = 200, b = 100, d = 0;
  reduce(&d, &a, &b, 1, DataType::kUint8, ReduceOp::kSum);
  EXPECT_EQ(d, 44);
}

TEST(Reduce, AvgScalesBySize) {
  std::vector<float> f = {4, 8, -12};
  scale_avg(f.data(), f.size(), DataType::kFloat32, 4);
  EXPECT_EQ(f, (std::vector<float>{1, 2, -3}));
  std::vector<int32_t> i = {9, -9};
  scale_avg(i.data(), i.size(), DataType::kInt32, 2);
  EXPECT_EQ(i, (std::vector<int32_t>{4, -4}));
  std::vector<uint16_t> h = {0x4400, 0xc800};  // f16 4, -8
  scale_avg(h.data(), h.size(), DataType::kFloat16, 4);
  EXPECT_EQ(h, (std::vector<uint16_t>{0x3c00, 0xc000}));  // 1, -2
  std::vector<uint16_t> bf = {0x4080, 0xc100};  // bf16 4, -8
  scale_avg(bf.data(), bf.size(), DataType::kBFloat16, 4);
  EXPECT_EQ(bf, (std::vector<uint16_t>{0x3f80, 0xc000}));  // 1, -2
}

// ------------------------------------------------------------ conversions

// f32 inputs for the narrowing checks: every sign/exponent/top-mantissa
// pattern (the top 16 bits) with low halves at and around the rounding
// points of f16 (bit 13) and bf16 (bit 16), plus random ones.
std::vector<float> narrowing_inputs() {
  std::vector<float> out;
  std::mt19937 g(42);
  const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001, 0xffff};
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {
    for (uint32_t lo : lows) out.push_back(std::bit_cast<float>(hi << 16 | lo));
    out.push_back(std::bit_cast<float>(hi << 16 | static_cast<uint32_t>(g() & 0xffff)));
  }
  return out;
}

TEST(Conversion, F16ToF32AllValues) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    auto x = static_cast<uint16_t>(h);
    ASSERT_EQ(std::bit_cast<uint32_t>(f16_to_f32(x)), std::bit_cast<uint32_t>(ref_f16_to_f32(x))) << std::hex << h;
  }
}

TEST(Conversion, F32ToF16) {
  for (float f : narrowing_inputs())
    ASSERT_EQ(f32_to_f16(f), ref_f32_to_f16(f)) << std::hex << std::bit_cast<uint32_t>(f);
  // Spot values: largest finite, overflow, ties, subnormals.
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e9f), 0xfc00);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);                // tie, down to even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);            // tie, up to even
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);                       // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);                       // tie to even: zero
  EXPECT_EQ(f32_to_f16(-0x1.8p-25f), 0x8001);                    // above the tie
  EXPECT_EQ(f32_to_f16(0x1.ffcp-15f), 0x0400);                   // 1023.5 x 2^-24: tie, up to the smallest normal
  EXPECT_EQ(f32_to_f16(std::bit_cast<float>(0x7f800001u)), 0x7e00);  // signalling NaN made quiet
  EXPECT_EQ(f32_to_f16(std::bit_cast<float>(0xffc02000u)), 0xfe01);  // payload's top bits kept
}

TEST(Conversion, BF16AllValuesAndNarrowing) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    auto x = static_cast<uint16_t>(h);
    ASSERT_EQ(std::bit_cast<uint32_t>(bf16_to_f32(x)), h << 16);
  }
  for (float f : narrowing_inputs())
    ASSERT_EQ(f32_to_bf16(f), ref_f32_to_bf16(f)) << std::hex << std::bit_cast<uint32_t>(f);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, down to even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, up to even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // overflow to infinity
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f800001u)), 0x7fc0);  // NaN stays NaN, quiet
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0xff80ffffu)), 0xffc0);
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) float hw_f16_to_f32(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
__attribute__((target("avx2,f16c"))) uint16_t hw_f32_to_f16(float f) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}

// The scalar conversions are what F16C does, bit for bit.
TEST(Conversion, ScalarMatchesF16C) {
  if (simd_level() < SimdLevel::kAvx2) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 0x10000; ++h) {
    auto x = static_cast<uint16_t>(h);
    ASSERT_EQ(std::bit_cast<uint32_t>(f16_to_f32(x)), std::bit_cast<uint32_t>(hw_f16_to_f32(x))) << std::hex << h;
  }
  for (float f : narrowing_inputs())
    ASSERT_EQ(f32_to_f16(f), hw_f32_to_f16(f)) << std::hex << std::bit_cast<uint32_t>(f);
}
#endif

// Every f16 and every bf16 through the kernels: x + (-0) is x (NaN: the canonical one),
// and x * 1 through scale_avg(n = 1) likewise, at every level.
TEST(Reduce, HalfRoundTripAllValues) {
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    bool f16 = dt == DataType::kFloat16;
    std::vector<uint16_t> all(0x10000), want(0x10000);
    for (uint32_t h = 0; h < 0x10000; ++h) {
      all[h] = static_cast<uint16_t>(h);
      bool nan = f16 ? ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) : ((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0);
      want[h] = static_cast<uint16_t>(nan ? (f16 ? 0x7e00 : 0x7fc0) : h);  // the canonical NaN
    }
    std::vector<uint16_t> neg_zero(all.size(), 0x8000);
    for (SimdLevel level : levels()) {
      std::vector<uint16_t> d(all.size()), s = all;
      reduce_at(level, d.data(), all.data(), neg_zero.data(), all.size(), dt, ReduceOp::kSum);
      scale_avg_at(level, s.data(), s.size(), dt, 1);
      for (size_t i = 0; i < all.size(); ++i) {
        ASSERT_EQ(d[i], want[i]) << dtype_name(dt) << " " << simd_level_name(level) << " sum " << std::hex << i;
        ASSERT_EQ(s[i], want[i]) << dtype_name(dt) << " " << simd_level_name(level) << " scale " << std::hex << i;
      }
    }
  }
}

// All pairs of special values, every op, every level, against the reference
// (and so against each other).
template <class Tr>
void check_specials(const std::vector<typename Tr::T>& specials) {
  using T = typename Tr::T;
  std::vector<T> a, b;
  for (T x : specials)
    for (T y : specials) {
      a.push_back(x);
      b.push_back(y);
    }
  for (ReduceOp op : kAllOps) {
    std::vector<T> want(a.size());
    for (size_t i = 0; i < a.size(); ++i) want[i] = Tr::op(op, a[i], b[i]);
    for (SimdLevel level : levels()) {
      SCOPED_TRACE(std::string(dtype_name(Tr::kType)) + " specials");
      check_level<Tr>(level, op, a, b, want, a.size());
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(Reduce, Float16Specials) {
  check_specials<F16>({0x0000, 0x8000,            // +-0
                       0x7c00, 0xfc00,            // +-inf
                       0x7e00, 0xfe00, 0x7c01,    // quiet NaNs, a signalling NaN
                       0x7d55,                    // signalling NaN with payload
                       0x0001, 0x8001, 0x03ff,    // subnormals
                       0x0400, 0x3c00, 0xbc00,    // smallest normal, +-1
                       0x7bff, 0xfbff, 0x7b53,    // +-65504, 60000
                       0x4c00, 0x4800, 0x3c01,    // 16, 8, 1 + ulp
                       0x1400, 0x2000});          // 2^-10, 2^-7
  // Named cases.
  auto sum = [](uint16_t x, uint16_t y) {
    uint16_t d = 0;
    reduce(&d, &x, &y, 1, DataType::kFloat16, ReduceOp::kSum);
    return d;
  };
  EXPECT_EQ(sum(0x7bff, 0x7bff), 0x7c00);  // 65504 + 65504 overflows to inf
  EXPECT_EQ(sum(0x7b53, 0x7b53), 0x7c00);  // 60000 + 60000
  EXPECT_EQ(sum(0x7bff, 0x4c00), 0x7c00);  // 65504 + 16 = 65520: tie, to inf
  EXPECT_EQ(sum(0x7bff, 0x4800), 0x7bff);  // 65504 + 8 rounds back down
  EXPECT_EQ(sum(0x0001, 0x0001), 0x0002);  // subnormals add exactly
  EXPECT_EQ(sum(0x03ff, 0x0001), 0x0400);  // into the normal range
  EXPECT_EQ(sum(0x7c00, 0xfc00), 0x7e00);  // inf - inf is the canonical NaN
  EXPECT_EQ(sum(0x8000, 0x8000), 0x8000);  // -0 + -0
  EXPECT_EQ(sum(0x0000, 0x8000), 0x0000);
  EXPECT_EQ(sum(0x7c01, 0x3c00), 0x7e00);  // NaN: the canonical one
}

TEST(Reduce, BFloat16Specials) {
  check_specials<BF16>({0x0000, 0x8000, 0x7f80, 0xff80,  // +-0, +-inf
                        0x7fc0, 0xffc0, 0x7f81,          // NaNs (one signalling)
                        0x0001, 0x8001, 0x0080,          // subnormals, smallest normal
                        0x3f80, 0xbf80, 0x3f81,          // +-1, 1 + ulp
                        0x7f7f, 0xff7f, 0x7f00,          // +-largest, 2^127
                        0x3b80, 0x4300});                // 2^-8, 128
  auto sum = [](uint16_t x, uint16_t y) {
    uint16_t d = 0;
    reduce(&d, &x, &y, 1, DataType::kBFloat16, ReduceOp::kSum);
    return d;
  };
  EXPECT_EQ(sum(0x7f7f, 0x7f7f), 0x7f80);  // overflow to inf
  EXPECT_EQ(sum(0x3f80, 0x3b80), 0x3f80);  // 1 + 2^-8: tie, to even (1)
  EXPECT_EQ(sum(0x3f81, 0x3b80), 0x3f82);  // 1+2^-7 + 2^-8: tie, to even (up)
  EXPECT_EQ(sum(0x7f81, 0x3f80), 0x7fc0);  // NaN: the canonical one
}

TEST(Reduce, Float32Specials) {
  const uint32_t bits[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001,
                           0x00000001, 0x80000001, 0x3f800000, 0xbf800000, 0x7f7fffff, 0xff7fffff};
  std::vector<float> specials;
  for (uint32_t u : bits) specials.push_back(std::bit_cast<float>(u));
  check_specials<F32>(specials);
}


// ---------------------------------------------------------------------------------------------- NaN bits

// NaNs (quiet and signalling, both signs, with payloads), infinities and some ordinary values, every pair of
// them, every op, through every kernel this CPU has: each level, cached and streaming stores, dst apart, == a
// and == b, at element offsets 0..3 (so a pair falls in head pieces, the vector loop and tails alike), and
// scale_avg on the raw inputs. Every path must give the reference's bits, so all give the same bits, and every
// NaN among them is the canonical one.
template <class Tr>
void check_nan_paths(const std::vector<uint64_t>& bits, uint64_t canonical) {
  using T = typename Tr::T;
  std::vector<T> values, a0, b0;
  for (uint64_t u : bits) {
    T v;
    std::memcpy(&v, &u, sizeof(T));  // the low bytes: x86-64 is little-endian
    values.push_back(v);
  }
  for (int rep = 0; rep < 3; ++rep)  // past the 4-vector loop at every level
    for (T x : values)
      for (T y : values) {
        a0.push_back(x);
        b0.push_back(y);
      }
  for (size_t off = 0; off < 4; ++off) {
    std::vector<T> a(a0.begin() + static_cast<ptrdiff_t>(off), a0.end());
    std::vector<T> b(b0.begin() + static_cast<ptrdiff_t>(off), b0.end());
    const size_t n = a.size();
    for (ReduceOp op : kAllOps) {
      std::vector<T> want(n);
      for (size_t i = 0; i < n; ++i) {
        want[i] = Tr::op(op, a[i], b[i]);
        if (Tr::is_nan(want[i])) {
          ASSERT_EQ(Tr::bits(want[i]), canonical) << "the reference's NaN is not canonical";
        }
      }
      for (SimdLevel level : levels()) {
        SCOPED_TRACE(std::string(dtype_name(Tr::kType)) + " NaN paths, off=" + std::to_string(off));
        check_level<Tr>(level, op, a, b, want, n);
        if (::testing::Test::HasFatalFailure()) return;
        if (op != ReduceOp::kAvg) continue;
        for (int group : {1, 3}) {
          std::vector<T> s = a;
          scale_avg_at(level, s.data(), n, Tr::kType, group);
          for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(Tr::bits(s[i]), Tr::bits(Tr::avg(a[i], group)))
                << where(level, op, n, i, "scale_avg of an input") << " /" << group;
        }
      }
    }
  }
}

TEST(Reduce, NanBitsFloat32) {
  check_nan_paths<F32>({0x7fc00000, 0xffc00000, 0x7fc12345, 0xffd00001,   // quiet NaNs, both signs, payloads
                        0x7f800001, 0xff800001, 0x7fa00000, 0xffbfffff,   // signalling NaNs
                        0x7f800000, 0xff800000, 0x00000000, 0x80000000,   // +-inf, +-0
                        0x3f800000, 0xc0200000, 0x7f7fffff},              // 1, -2.5, largest
                       0x7fc00000);
}

TEST(Reduce, NanBitsFloat64) {
  check_nan_paths<F64>({0x7ff8000000000000, 0xfff8000000000000, 0x7ff8000000012345, 0xfffc000000000001,
                        0x7ff0000000000001, 0xfff0000000000001, 0x7ff4000000000000, 0xfff7ffffffffffff,
                        0x7ff0000000000000, 0xfff0000000000000, 0x0000000000000000, 0x8000000000000000,
                        0x3ff0000000000000, 0xc004000000000000, 0x7fefffffffffffff},
                       0x7ff8000000000000);
}

TEST(Reduce, NanBitsFloat16) {
  check_nan_paths<F16>({0x7e00, 0xfe00, 0x7e55, 0xfe01,   // quiet NaNs, both signs, payloads
                        0x7c01, 0xfc01, 0x7d55, 0xfdff,   // signalling NaNs
                        0x7c00, 0xfc00, 0x0000, 0x8000,   // +-inf, +-0
                        0x3c00, 0xc100, 0x7bff},          // 1, -2.5, 65504
                       0x7e00);
}

TEST(Reduce, NanBitsBFloat16) {
  check_nan_paths<BF16>({0x7fc0, 0xffc0, 0x7fc5, 0xffe1,   // quiet NaNs, both signs, payloads
                         0x7f81, 0xff81, 0x7fa5, 0xffbf,   // signalling NaNs
                         0x7f80, 0xff80, 0x0000, 0x8000,   // +-inf, +-0
                         0x3f80, 0xc020, 0x7f7f},          // 1, -2.5, largest
                        0x7fc0);
}

}  // namespace
}  // namespace grex::detail
