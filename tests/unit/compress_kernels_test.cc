// SPDX-License-Identifier: Apache-2.0
// The compressed allreduce's conversions (collectives/compress_kernels.h):
// the AVX2 + F16C and AVX-512 forms give the scalar forms' bits (which are
// gpu/reduce_elem.h's, the GPU kernels' arithmetic) for every kind of value:
// normal, subnormal, halfway cases, beyond fp16's range, infinities, NaN,
// signed zeros; and every length around the vector width.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "collectives/compress_kernels.h"
#include "gpu/reduce_elem.h"

namespace grex::detail {
namespace {

std::vector<float> values(size_t n) {
  std::vector<float> v;
  const float specials[] = {0.f, -0.f, 1.f, -1.f, 65504.f, 65520.f, 70000.f, -1e9f, 1e-8f, 6e-8f, 3e-5f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max(), 1.0f + 1.0f / 256, 1.0f + 3.0f / 512};
  for (float s : specials) v.push_back(s);
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bits;
  std::normal_distribution<float> normal(0.f, 10.f);
  while (v.size() < n) {
    v.push_back(normal(gen));
    uint32_t b = bits(gen);
    float f;
    std::memcpy(&f, &b, 4);
    v.push_back(f);  // any bit pattern: NaNs with payloads, subnormals, huge
  }
  v.resize(n);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The same bits, but any NaN equals any NaN: an addition with a NaN operand
// keeps one operand's payload, and which one depends on the order the
// compiler chose for the scalar form (only the payload differs).
bool same_bits_but_nan(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], 4) != 0) return false;
  }
  return true;
}

// The vector levels this CPU runs (a level above it would run below it,
// and compare a form with itself).
std::vector<SimdLevel> vector_levels() {
  std::vector<SimdLevel> l;
  for (SimdLevel x : {SimdLevel::kAvx2, SimdLevel::kAvx512})
    if (x <= simd_level()) l.push_back(x);
  return l;
}

TEST(CompressKernels, VectorFormsGiveTheScalarBits) {
  if (simd_level() == SimdLevel::kScalar) GTEST_SKIP() << "no AVX2 + F16C here: the scalar form is the only one";
  if (simd_level() != SimdLevel::kAvx512) std::printf("no AVX-512 here: the AVX2 forms alone are checked\n");
  for (SimdLevel level : vector_levels())
    for (Compression kind : {Compression::kBf16, Compression::kFp16})
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{15}, size_t{16}, size_t{17},
                       size_t{31}, size_t{100003}}) {
        SCOPED_TRACE(std::string(simd_level_name(level)) + (kind == Compression::kBf16 ? " bf16 " : " fp16 ") +
                     std::to_string(n));
        const std::vector<float> v = values(n), add = values(n + 3);
        std::vector<uint16_t> ws(n), wv(n);
        std::vector<float> rs(n, 0.25f), rv(n, 0.25f), bs(n), bv(n);
        narrow_f32_at(SimdLevel::kScalar, kind, v.data(), n, ws.data(), rs.data(), 3.0f, bs.data());
        narrow_f32_at(level, kind, v.data(), n, wv.data(), rv.data(), 3.0f, bv.data());
        EXPECT_EQ(ws, wv);
        EXPECT_TRUE(same_bits_but_nan(rs, rv)) << "residuals differ";
        EXPECT_TRUE(same_bits(bs, bv)) << "the values kept differ";
        for (size_t i = 0; i < n; ++i) {  // and they are reduce_elem.h's
          const uint16_t want = kind == Compression::kBf16 ? elem::f32_to_bf16(v[i]) : elem::f32_to_f16(v[i]);
          ASSERT_EQ(ws[i], want) << "element " << i;
        }
        std::vector<float> in_place = v;  // back == v: one pass, the same wire bytes and values
        std::vector<uint16_t> wi(n);
        narrow_f32_at(level, kind, in_place.data(), n, wi.data(), nullptr, 1.f, in_place.data());
        EXPECT_EQ(wi, ws);
        EXPECT_TRUE(same_bits(in_place, bs)) << "in place";
        std::vector<float> os(n), ov(n);
        widen_add_at(SimdLevel::kScalar, kind, ws.data(), n, v.data(), add.data(), os.data());
        widen_add_at(level, kind, ws.data(), n, v.data(), add.data(), ov.data());
        EXPECT_TRUE(same_bits_but_nan(os, ov)) << "widen_add differs";
        widen_add_at(SimdLevel::kScalar, kind, ws.data(), n, v.data(), nullptr, os.data());
        widen_add_at(level, kind, ws.data(), n, v.data(), nullptr, ov.data());
        EXPECT_TRUE(same_bits_but_nan(os, ov)) << "widen_add without b differs";
        widen_add_at(level, kind, ws.data(), n, nullptr, nullptr, ov.data());
        for (size_t i = 0; i < n; ++i) {  // widened alone: reduce_elem.h's, and what narrow kept
          const float want = kind == Compression::kBf16 ? elem::bf16_to_f32(ws[i]) : elem::f16_to_f32(ws[i]);
          uint32_t x, y, z;
          std::memcpy(&x, &ov[i], 4);
          std::memcpy(&y, &want, 4);
          std::memcpy(&z, &bs[i], 4);
          ASSERT_EQ(x, y) << "widen element " << i;
          ASSERT_EQ(z, y) << "kept element " << i;
        }
      }
}

TEST(CompressKernels, Int8VectorFormGivesTheScalarBits) {
  if (simd_level() == SimdLevel::kScalar) GTEST_SKIP() << "no AVX2 here: the scalar form is the only one";
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.f, 3.f);
  for (SimdLevel level : vector_levels())
    for (size_t m : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{15}, size_t{16}, size_t{17}, size_t{255},
                     size_t{256}, size_t{257}, size_t{1000}, size_t{100003}}) {
      SCOPED_TRACE(std::string(simd_level_name(level)) + " " + std::to_string(m));
      std::vector<float> v(m), a(m), b(m);
      for (size_t i = 0; i < m; ++i) v[i] = normal(gen), a[i] = normal(gen), b[i] = normal(gen);
      if (m > 300) std::fill(v.begin() + 256, v.begin() + 512, 0.f);  // an all-zero block: scale 0
      const size_t bytes = int8_bytes(m);
      std::vector<uint8_t> ws(bytes), wv(bytes), wi(bytes);
      std::vector<float> rs(m, 0.5f), rv(m, 0.5f), bs(m), bv(m);
      int8_narrow_at(SimdLevel::kScalar, v.data(), m, ws.data(), rs.data(), 2.f, bs.data());
      int8_narrow_at(level, v.data(), m, wv.data(), rv.data(), 2.f, bv.data());
      EXPECT_EQ(ws, wv);
      EXPECT_TRUE(same_bits(rs, rv)) << "residuals differ";
      EXPECT_TRUE(same_bits(bs, bv)) << "the values kept differ";
      std::vector<float> in_place = v;
      int8_narrow_at(level, in_place.data(), m, wi.data(), nullptr, 1.f, in_place.data());
      EXPECT_EQ(wi, ws);
      EXPECT_TRUE(same_bits(in_place, bs)) << "in place";
      std::vector<float> os(m), ov(m);
      int8_widen_add_at(SimdLevel::kScalar, ws.data(), m, a.data(), b.data(), os.data());
      int8_widen_add_at(level, ws.data(), m, a.data(), b.data(), ov.data());
      EXPECT_TRUE(same_bits(os, ov));
      int8_widen_add_at(SimdLevel::kScalar, ws.data(), m, a.data(), nullptr, os.data());
      int8_widen_add_at(level, ws.data(), m, a.data(), nullptr, ov.data());
      EXPECT_TRUE(same_bits(os, ov));
      int8_widen_add_at(SimdLevel::kScalar, ws.data(), m, nullptr, nullptr, os.data());
      int8_widen_add_at(level, ws.data(), m, nullptr, nullptr, ov.data());
      EXPECT_TRUE(same_bits(os, ov));
      EXPECT_TRUE(same_bits(os, bs)) << "what narrow kept is what the wire widens to";
      for (size_t i = 0; i < m; ++i)  // within half a step of the block's largest magnitude / 127
        ASSERT_LE(std::fabs(os[i] - v[i]), 0.5f * 8.f * 3.f / 127.f * 4.f) << i;
    }
}

TEST(CompressKernels, RoundTripsValuesTheFormatHolds) {
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    std::vector<float> v(1000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>(i % 512) - 256) / 4;  // 8 bits: exact in both
    for (Compression kind : {Compression::kBf16, Compression::kFp16}) {
      std::vector<uint16_t> w(v.size());
      std::vector<float> res(v.size(), 0.f), back(v.size());
      narrow_f32_at(level, kind, v.data(), v.size(), w.data(), res.data(), 1.f);
      std::vector<float> zeros(v.size(), 0.f);
      widen_add_at(level, kind, w.data(), v.size(), zeros.data(), nullptr, back.data());
      EXPECT_EQ(back, v);
      EXPECT_EQ(res, zeros) << "no rounding, no residual";
    }
  }
}

}  // namespace
}  // namespace grex::detail
