// SPDX-License-Identifier: Apache-2.0
// The reference reduction of one element, in plain C++: what every kernel of reduce.h must give bit for bit.
// The unit tests check the kernels against it and grex-perf's #wrong column its results; it is not a kernel.
#pragma once

#include <grex/communicator.h>

#include <limits>
#include <type_traits>

namespace grex::detail {

/// x op y for one element of an integer or native floating type, as reduce() defines it: integers wrap (two's
/// complement); min and max keep x when either is NaN or both compare equal; a NaN result is the canonical
/// quiet NaN (std::numeric_limits<T>::quiet_NaN()). kAvg reduces as kSum (see scale_avg_ref()).
template <class T>
T reduce_ref(ReduceOp op, T x, T y) noexcept {
  T r = x;
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // no signed-overflow UB
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) r = static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
    if (op == ReduceOp::kProd) r = static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
  } else {
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) r = x + y;
    if (op == ReduceOp::kProd) r = x * y;
  }
  if (op == ReduceOp::kMin) r = y < x ? y : x;
  if (op == ReduceOp::kMax) r = x < y ? y : x;
  if constexpr (std::is_floating_point_v<T>) {
    if (r != r) r = std::numeric_limits<T>::quiet_NaN();
  }
  return r;
}

/// The last step of kAvg, as scale_avg() defines it: s times the reciprocal of n for floats (rounded to T, a NaN
/// result canonical as in reduce_ref()), s / n truncating for integers.
template <class T>
T scale_avg_ref(T s, int n) noexcept {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(s / n);
  } else {
    T r = s * (T{1} / static_cast<T>(n));
    return r != r ? std::numeric_limits<T>::quiet_NaN() : r;
  }
}

}  // namespace grex::detail
