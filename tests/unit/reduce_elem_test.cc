// SPDX-License-Identifier: Apache-2.0
// gpu/reduce_elem.h, the element arithmetic a GPU kernel will use, against the
// CPU's reduction kernels at every SIMD level this machine has, bit for bit:
// every f16 and bf16 value against a spread of partners, floats and doubles
// with NaNs, infinities, zeros and subnormals, integers that wrap.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "collectives/reduce.h"
#include "gpu/reduce_elem.h"

namespace grex::detail {
namespace {

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax};

std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> l{SimdLevel::kScalar};
  if (simd_level() >= SimdLevel::kAvx2) l.push_back(SimdLevel::kAvx2);
  if (simd_level() >= SimdLevel::kAvx512) l.push_back(SimdLevel::kAvx512);
  return l;
}

template <class F>
auto by_op(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::kSum: return f.template operator()<elem::Op::kSum>();
    case ReduceOp::kProd: return f.template operator()<elem::Op::kProd>();
    case ReduceOp::kMin: return f.template operator()<elem::Op::kMin>();
    default: return f.template operator()<elem::Op::kMax>();
  }
}

// reduce_at over whole arrays (vector paths, heads and tails) against the
// header element by element; reports the first difference.
template <class T, class Elem>
void check(DataType type, const std::vector<T>& a, const std::vector<T>& b, Elem elem_fn, const char* what) {
  for (SimdLevel level : levels()) {
    for (ReduceOp op : kOps) {
      std::vector<T> got(a.size());
      reduce_at(level, got.data(), a.data(), b.data(), a.size(), type, op);
      for (size_t i = 0; i < a.size(); ++i) {
        const T want = elem_fn(op, a[i], b[i]);
        if (std::memcmp(&got[i], &want, sizeof(T)) != 0) {
          uint64_t g = 0, w = 0, x = 0, y = 0;
          std::memcpy(&g, &got[i], sizeof(T));
          std::memcpy(&w, &want, sizeof(T));
          std::memcpy(&x, &a[i], sizeof(T));
          std::memcpy(&y, &b[i], sizeof(T));
          FAIL() << what << " " << simd_level_name(level) << " op " << static_cast<int>(op) << " i " << i << std::hex
                 << ": 0x" << x << " . 0x" << y << " gave 0x" << g << ", the header 0x" << w;
        }
      }
    }
  }
}

// Every 16-bit pattern as a, paired with partners that walk the patterns in
// another order (and with a itself), so NaNs, infinities, subnormals and
// every rounding case meet.
void halves(std::vector<uint16_t>* a, std::vector<uint16_t>* b) {
  for (uint32_t i = 0; i < 65536; ++i) {
    a->push_back(static_cast<uint16_t>(i));
    b->push_back(static_cast<uint16_t>(i * 40503u + 17));
    a->push_back(static_cast<uint16_t>(i));
    b->push_back(static_cast<uint16_t>(i));
  }
}

TEST(ReduceElem, F16MatchesEveryCpuKernel) {
  std::vector<uint16_t> a, b;
  halves(&a, &b);
  check<uint16_t>(DataType::kFloat16, a, b,
                  [](ReduceOp op, uint16_t x, uint16_t y) {
                    return by_op(op, [&]<elem::Op o>() { return elem::reduce_f16<o>(x, y); });
                  },
                  "f16");
}

TEST(ReduceElem, Bf16MatchesEveryCpuKernel) {
  std::vector<uint16_t> a, b;
  halves(&a, &b);
  check<uint16_t>(DataType::kBFloat16, a, b,
                  [](ReduceOp op, uint16_t x, uint16_t y) {
                    return by_op(op, [&]<elem::Op o>() { return elem::reduce_bf16<o>(x, y); });
                  },
                  "bf16");
}

// Random bits (every class of float shows up), plus the special values.
template <class T, class U>
void floats(std::vector<T>* a, std::vector<T>* b, std::initializer_list<U> specials) {
  std::mt19937_64 rng(7);
  auto put = [](std::vector<T>* v, U u) {
    T t;
    std::memcpy(&t, &u, sizeof t);
    v->push_back(t);
  };
  for (U s : specials)
    for (U t : specials) {
      put(a, s);
      put(b, t);
    }
  for (int i = 0; i < 200003; ++i) {
    put(a, static_cast<U>(rng()));
    put(b, static_cast<U>(rng()));
  }
}

TEST(ReduceElem, FloatAndDoubleMatchEveryCpuKernel) {
  std::vector<float> fa, fb;
  floats<float, uint32_t>(&fa, &fb, {0u, 0x80000000u, 1u, 0x807fffffu, 0x3f800000u, 0x7f7fffffu, 0x7f800000u,
                                     0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u});
  check<float>(DataType::kFloat32, fa, fb,
               [](ReduceOp op, float x, float y) {
                 return by_op(op, [&]<elem::Op o>() { return elem::reduce_one<o>(x, y); });
               },
               "f32");
  std::vector<double> da, db;
  floats<double, uint64_t>(&da, &db, {0ull, 0x8000000000000000ull, 1ull, 0x3ff0000000000000ull,
                                      0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff8000000000000ull,
                                      0xfff0000000000001ull});
  check<double>(DataType::kFloat64, da, db,
                [](ReduceOp op, double x, double y) {
                  return by_op(op, [&]<elem::Op o>() { return elem::reduce_one<o>(x, y); });
                },
                "f64");
}

template <class T>
void integers(DataType type, const char* what) {
  std::mt19937_64 rng(11);
  std::vector<T> a, b;
  for (int i = 0; i < 100003; ++i) {
    a.push_back(static_cast<T>(rng()));
    b.push_back(static_cast<T>(rng()));
  }
  check<T>(type, a, b,
           [](ReduceOp op, T x, T y) { return by_op(op, [&]<elem::Op o>() { return elem::reduce_one<o>(x, y); }); },
           what);
}

TEST(ReduceElem, IntegersMatchEveryCpuKernel) {
  integers<int32_t>(DataType::kInt32, "i32");
  integers<int64_t>(DataType::kInt64, "i64");
  integers<uint8_t>(DataType::kUint8, "u8");
}

}  // namespace
}  // namespace grex::detail
