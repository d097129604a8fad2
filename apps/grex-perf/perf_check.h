// SPDX-License-Identifier: Apache-2.0
// grex-perf's correctness check: rank-dependent inputs whose reduction over any
// number of ranks is exactly computable, and a counter of wrong elements.
#pragma once

#include <grex/communicator.h>

#include <cstddef>
#include <cstdint>

namespace grex::perf {

/// Element i of every rank's input depends on i only through i % kPatternPeriod.
constexpr size_t kPatternPeriod = 55;

/// The check pattern of one (type, op, rank, group size). Inputs are small
/// integers (products of ones and twos for kProd), so float sums and products
/// are exact in any order; integer types wrap exactly as the kernels do.
class CheckPattern {
 public:
  CheckPattern(DataType type, ReduceOp op, int rank, int nranks);

  /// Writes this rank's input into `count` elements of `buf`.
  void fill_input(void* buf, size_t count) const noexcept;
  /// Number of elements of `buf` that differ from the reduction of every rank's
  /// input (floats within a relative 1e-6, integers exactly).
  size_t count_wrong(const void* buf, size_t count) const noexcept;
  /// The expected result at element i (as double, for messages and tests).
  double expected_at(size_t i) const noexcept;

  /// The input value of `rank` at element `i` before conversion to the type.
  static int64_t input_value(DataType type, ReduceOp op, int rank, size_t i) noexcept;

 private:
  DataType type_;
  alignas(8) unsigned char input_[kPatternPeriod * 8] = {};
  alignas(8) unsigned char expected_[kPatternPeriod * 8] = {};
};

}  // namespace grex::perf
