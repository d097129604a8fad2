// SPDX-License-Identifier: Apache-2.0
// Reduction kernels.
//
// Three implementations of every (dtype, op), picked at run time once from what
// the CPU supports (simd_level()), so one binary runs on any x86-64:
//   avx512  explicit AVX-512 (F, BW, DQ, VL) intrinsics, 64-byte vectors;
//   avx2    explicit AVX2 + F16C intrinsics, 32-byte vectors;
//   scalar  plain loops (the compiler vectorises the native types with SSE2);
//           f16 and bf16 go element by element through f16_to_f32() and friends.
// The SIMD kernels are written once, in reduce_simd_kernels.h, over a traits
// struct of vector types and intrinsics that reduce_avx2.cc and reduce_avx512.cc
// each define and instantiate. The SIMD code sits in regions compiled for its
// instruction set (#pragma GCC target, or clang's attribute push), not in
// target_clones/ifunc or per-file -m flags (which would let the linker keep an
// AVX-512 copy of an inline function every file uses), so it builds and runs
// under ASan and UBSan like any other code.
//
// f16 widens with vcvtph2ps and narrows with vcvtps2ph (round to nearest even);
// bf16 widens by a 16-bit shift and narrows by adding 0x7fff plus the lowest
// kept bit. Either way the op runs on f32 vectors with the same instruction the
// f32 kernel uses, and the scalar conversions match the hardware bit for bit
// (reduce_test checks all of it). Every float op's result then has its NaN lanes
// replaced by the canonical NaN (reduce.h): a compare and a blend (AVX-512: one
// vfixupimm) per vector, which bf16's rounding keeps as it is.
//
// Each SIMD kernel aligns dst to the vector size with a short first piece,
// then runs four vectors per iteration with ordinary (cached) stores: the
// reduced data is sent or reduced again soon, so non-temporal stores would only
// push it out to DRAM. Pieces shorter than a vector (head and tail) go through
// a vector-sized buffer on the stack, so they take exactly the same arithmetic.
// The exception is a dst too big for this core's share of the last-level
// cache, from where glibc's memcpy also turns to non-temporal stores (3/4 of
// that share, its default): no one reads it from cache soon anyway, and
// ordinary stores would read every dst line from DRAM for ownership first, a
// quarter of the traffic for nothing. Such a call (dst apart from a and b)
// runs the reduce_streaming table: the same loop and arithmetic with
// streaming stores in the vector-aligned middle, then a store fence.
#include "collectives/reduce.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include <unistd.h>

#include "collectives/reduce_simd.h"
#include "gpu/reduce_elem.h"

namespace grex::detail {

// ---------------------------------------------------------------- conversions
// The element arithmetic lives in gpu/reduce_elem.h, shared with the GPU kernels.

float f16_to_f32(uint16_t h) noexcept { return elem::f16_to_f32(h); }
uint16_t f32_to_f16(float f) noexcept { return elem::f32_to_f16(f); }
float bf16_to_f32(uint16_t h) noexcept { return elem::bf16_to_f32(h); }
uint16_t f32_to_bf16(float f) noexcept { return elem::f32_to_bf16(f); }

namespace {

using namespace simd;

// -------------------------------------------------------------------- scalar

namespace scalar {

// The ops and the canonical NaN: gpu/reduce_elem.h's, with this file's Op.
template <Op op, class T>
inline T apply(T x, T y) {
  return elem::apply<static_cast<elem::Op>(static_cast<int>(op))>(x, y);
}
template <class T>
inline T canonical(T x) {
  return elem::canonical(x);
}

// Element i of a buffer that need not be aligned to its type (a user's
// buffer may start at any byte): copied, never dereferenced as T, which
// compiles to the same plain moves and vector loops.
template <class T>
inline T load(const void* p, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(p) + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
inline void store(void* p, size_t i, T v) {
  std::memcpy(static_cast<unsigned char*>(p) + i * sizeof(T), &v, sizeof(T));
}

template <class T, Op op>
void native(void* d, const void* a, const void* b, size_t n) {
  for (size_t i = 0; i < n; ++i) store<T>(d, i, canonical(apply<op>(load<T>(a, i), load<T>(b, i))));
}

template <float (*Widen)(uint16_t) noexcept, uint16_t (*Narrow)(float) noexcept, Op op>
void half(void* d, const void* a, const void* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    store<uint16_t>(d, i, Narrow(canonical(apply<op>(Widen(load<uint16_t>(a, i)), Widen(load<uint16_t>(b, i))))));
}

template <class T>
void scale_native(void* p, size_t n, int group) {
  T inv = T{1} / static_cast<T>(group);
  for (size_t i = 0; i < n; ++i) store<T>(p, i, canonical(load<T>(p, i) * inv));
}

template <float (*Widen)(uint16_t) noexcept, uint16_t (*Narrow)(float) noexcept>
void scale_half(void* p, size_t n, int group) {
  float inv = 1.0f / static_cast<float>(group);
  for (size_t i = 0; i < n; ++i) store<uint16_t>(p, i, Narrow(canonical(Widen(load<uint16_t>(p, i)) * inv)));
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

constexpr Kernels make_kernels() {
  Kernels k = {
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
      {},
  };
  // No streaming stores in portable C++: the same loops.
  for (int t = 0; t < kDataTypes; ++t)
    for (int o = 0; o < kOps; ++o) k.reduce_streaming[t][o] = k.reduce[t][o];
  return k;
}
constexpr Kernels kKernels = make_kernels();

}  // namespace scalar

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
  if (level == SimdLevel::kAvx512) return kAvx512Kernels;
  if (level == SimdLevel::kAvx2) return kAvx2Kernels;
#endif
  return scalar::kKernels;
}

template <class T>
void divide(void* p, size_t n, int group) {
  for (size_t i = 0; i < n; ++i) scalar::store<T>(p, i, static_cast<T>(scalar::load<T>(p, i) / group));
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

size_t reduce_streaming_min_bytes() noexcept {
  static const size_t bytes = [] {
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const size_t shared = l3 > 0 ? static_cast<size_t>(l3) : size_t{32} << 20;
    return std::max<size_t>(size_t{8} << 20, shared / static_cast<size_t>(std::max(1L, cpus)) * 3 / 4);
  }();
  return bytes;
}

namespace {
// Runs the (type, op) kernel of one of a level's tables; kAvg reduces as kSum.
void run_kernel(const ReduceFn (&table)[kDataTypes][kOps], void* dst, const void* a, const void* b, size_t count,
                DataType type, ReduceOp op) noexcept {
  auto t = static_cast<size_t>(type);
  auto o = op == ReduceOp::kAvg ? size_t{0} : static_cast<size_t>(op);
  if (t >= kDataTypes || o >= kOps || count == 0) return;
  table[t][o](dst, a, b, count);
}
}  // namespace

void reduce_at(SimdLevel level, void* dst, const void* a, const void* b, size_t count, DataType type,
               ReduceOp op) noexcept {
  // A dst too big for this core's share of the cache, apart from both
  // inputs, gets streaming stores (in place, its lines were just read).
  const size_t bytes = count * dtype_size(type);
  // Less than one 32-byte vector: the scalar loop. The vector kernels would
  // take it through a stack buffer (three copies and a full step: an 8-byte
  // allreduce's reduce call took 236 instructions, 155 this way); every level
  // gives the same bits (reduce_test holds each to one reference).
  if (bytes < 32) level = SimdLevel::kScalar;
  const bool stream = bytes >= reduce_streaming_min_bytes() && dst != a && dst != b;
  const Kernels& k = kernels(level);
  run_kernel(stream ? k.reduce_streaming : k.reduce, dst, a, b, count, type, op);
}

void reduce_streaming(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op) noexcept {
  reduce_streaming_at(simd_level(), dst, a, b, count, type, op);
}

void reduce_streaming_at(SimdLevel level, void* dst, const void* a, const void* b, size_t count, DataType type,
                         ReduceOp op) noexcept {
  run_kernel(kernels(level).reduce_streaming, dst, a, b, count, type, op);
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
