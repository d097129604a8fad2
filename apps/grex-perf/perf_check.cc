// SPDX-License-Identifier: Apache-2.0
// The check pattern: per-type fills, expected results (the reduction of every rank's input, computed here
// element by element in the arithmetic reduce() defines) and comparisons.
#include "perf_check.h"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace grex::perf {
namespace {

constexpr double kFloatRelTolerance = 1e-6;

// x op y for one element as grex's reduce() defines it on the pattern's inputs
// (small integers, never NaN): integers wrap in two's complement, kAvg sums
// (avg_of() divides at the end).
template <class T>
T combine(ReduceOp op, T x, T y) noexcept {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wrap without signed-overflow UB
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
    if (op == ReduceOp::kProd) return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
  } else {
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) return x + y;
    if (op == ReduceOp::kProd) return x * y;
  }
  if (op == ReduceOp::kMin) return y < x ? y : x;
  return x < y ? y : x;  // kMax
}

// The last step of kAvg: times the reciprocal of n for floats, truncating division for integers.
template <class T>
T avg_of(T sum, int n) noexcept {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(sum / n);
  else
    return sum * (T{1} / static_cast<T>(n));
}

template <class T>
void build(unsigned char* input, unsigned char* expected, DataType type, ReduceOp op, int rank, int nranks) {
  T* in = reinterpret_cast<T*>(input);
  T* want = reinterpret_cast<T*>(expected);
  for (size_t i = 0; i < kPatternPeriod; ++i) {
    in[i] = static_cast<T>(CheckPattern::input_value(type, op, rank, i));
    T acc = static_cast<T>(CheckPattern::input_value(type, op, 0, i));
    for (int r = 1; r < nranks; ++r)
      acc = combine(op, acc, static_cast<T>(CheckPattern::input_value(type, op, r, i)));
    want[i] = op == ReduceOp::kAvg ? avg_of(acc, nranks) : acc;
  }
}

template <class T>
void fill(const unsigned char* input, void* buf, size_t count) {
  const T* in = reinterpret_cast<const T*>(input);
  T* out = static_cast<T*>(buf);
  size_t j = 0;
  for (size_t i = 0; i < count; ++i) {
    out[i] = in[j];
    if (++j == kPatternPeriod) j = 0;
  }
}

template <class T>
size_t wrong(const unsigned char* expected, const void* buf, size_t count, size_t offset) {
  const T* want = reinterpret_cast<const T*>(expected);
  const T* got = static_cast<const T*>(buf);
  size_t bad = 0, j = offset % kPatternPeriod;
  for (size_t i = 0; i < count; ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      double w = want[j], g = got[i];
      bool good = std::fabs(g - w) <= kFloatRelTolerance * std::fmax(1.0, std::fabs(w));  // false for NaN
      bad += good ? 0 : 1;
    } else {
      bad += got[i] == want[j] ? 0 : 1;
    }
    if (++j == kPatternPeriod) j = 0;
  }
  return bad;
}

// Calls F<T>::... for the C++ type of `type`.
template <class Fn>
auto dispatch(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::kFloat32: return fn(float{});
    case DataType::kFloat64: return fn(double{});
    case DataType::kInt32: return fn(int32_t{});
    case DataType::kInt64: return fn(int64_t{});
    case DataType::kUint8: return fn(uint8_t{});
    case DataType::kFloat16:   // not offered by -d (perf_args.cc): no 16-bit float
    case DataType::kBFloat16:  // pattern check yet
      break;
  }
  return fn(float{});
}

}  // namespace

int64_t CheckPattern::input_value(DataType type, ReduceOp op, int rank, size_t i) noexcept {
  auto r = static_cast<size_t>(rank);
  if (op == ReduceOp::kProd) return i % 5 == r % 5 ? 2 : 1;  // 2^(ranks/5) at most
  auto base = static_cast<int64_t>((i * 7 + r * 3) % 11);    // 0..10
  return type == DataType::kUint8 ? base : base - 5;         // signed types: -5..5
}

CheckPattern::CheckPattern(DataType type, ReduceOp op, int rank, int nranks)
    : type_(type), op_(op), rank_(rank), nranks_(nranks) {
  dispatch(type, [&](auto tag) {
    build<decltype(tag)>(input_, expected_, type, op, rank, nranks);
    return 0;
  });
}

void CheckPattern::fill_input(void* buf, size_t count) const noexcept {
  dispatch(type_, [&](auto tag) {
    fill<decltype(tag)>(input_, buf, count);
    return 0;
  });
}

size_t CheckPattern::count_wrong(const void* buf, size_t count, size_t offset) const noexcept {
  return dispatch(type_, [&](auto tag) { return wrong<decltype(tag)>(expected_, buf, count, offset); });
}

size_t CheckPattern::count_wrong_input(int src, const void* buf, size_t count, size_t offset) const noexcept {
  return dispatch(type_, [&](auto tag) {
    using T = decltype(tag);
    alignas(8) unsigned char input[kPatternPeriod * 8];
    T* in = reinterpret_cast<T*>(input);
    for (size_t i = 0; i < kPatternPeriod; ++i) in[i] = static_cast<T>(input_value(type_, op_, src, i));
    return wrong<T>(input, buf, count, offset);
  });
}

double CheckPattern::expected_at(size_t i) const noexcept {
  return dispatch(type_, [&](auto tag) {
    using T = decltype(tag);
    return static_cast<double>(reinterpret_cast<const T*>(expected_)[i % kPatternPeriod]);
  });
}

size_t collective_input_elems(Mode mode, size_t count, int nranks, int rank, int root) noexcept {
  switch (mode) {
    case Mode::kReduceScatter:
    case Mode::kAlltoall: return count * static_cast<size_t>(nranks);
    case Mode::kBroadcast: return rank == root ? count : 0;
    default: return count;
  }
}

size_t collective_output_elems(Mode mode, size_t count, int nranks, int rank, int root) noexcept {
  switch (mode) {
    case Mode::kAllgather:
    case Mode::kAlltoall: return count * static_cast<size_t>(nranks);
    case Mode::kReduce: return rank == root ? count : 0;
    default: return count;
  }
}

size_t count_wrong_output(Mode mode, const CheckPattern& p, const void* out, size_t count, int root) noexcept {
  const auto* bytes = static_cast<const unsigned char*>(out);
  size_t block = count * dtype_size(p.type());
  auto me = static_cast<size_t>(p.rank());
  size_t bad = 0;
  switch (mode) {
    case Mode::kAllreduce: return p.count_wrong(out, count);
    case Mode::kReduce: return p.rank() == root ? p.count_wrong(out, count) : 0;
    case Mode::kReduceScatter: return p.count_wrong(out, count, me * count);
    case Mode::kBroadcast: return p.count_wrong_input(root, out, count);
    case Mode::kAllgather:
      for (int j = 0; j < p.nranks(); ++j) bad += p.count_wrong_input(j, bytes + static_cast<size_t>(j) * block, count);
      return bad;
    case Mode::kAlltoall:
      for (int j = 0; j < p.nranks(); ++j)
        bad += p.count_wrong_input(j, bytes + static_cast<size_t>(j) * block, count, me * count);
      return bad;
    case Mode::kSendrecv: return p.count_wrong_input((p.rank() + p.nranks() - 1) % p.nranks(), out, count);
    case Mode::kSendBw:
    case Mode::kWriteBw:
    case Mode::kWriteLat:
    case Mode::kSendLat: break;
  }
  return 0;
}

void poison(void* buf, size_t count, DataType type) noexcept {
  if (count > 0) std::memset(buf, 0xFF, count * dtype_size(type));
}

}  // namespace grex::perf
