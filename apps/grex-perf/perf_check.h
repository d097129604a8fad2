// SPDX-License-Identifier: Apache-2.0
// grex-perf's correctness check: rank-dependent inputs whose reduction over any
// number of ranks is exactly computable, what each collective mode should leave
// in a rank's output, and a counter of wrong elements.
#pragma once

#include <grex/communicator.h>

#include <cstddef>
#include <cstdint>

#include "perf_args.h"

namespace grex::perf {

/// Element i of every rank's input depends on i only through i % kPatternPeriod.
constexpr size_t kPatternPeriod = 55;

/// The check pattern of one (type, op, rank, group size). Inputs are small
/// integers (products of ones and twos for kProd), so float sums and products
/// are exact in any order; integer types wrap exactly as the kernels do.
/// Collectives that only move data use it with kSum.
class CheckPattern {
 public:
  CheckPattern(DataType type, ReduceOp op, int rank, int nranks);

  /// Writes this rank's input into `count` elements of `buf` (elements 0..count-1).
  void fill_input(void* buf, size_t count) const noexcept;
  /// Number of elements of `buf` that differ from the reduction of every rank's
  /// input at elements offset..offset+count-1 (floats within a relative 1e-6,
  /// integers exactly).
  size_t count_wrong(const void* buf, size_t count, size_t offset = 0) const noexcept;
  /// Number of elements of `buf` that differ from rank `src`'s input at elements
  /// offset..offset+count-1 (what allgather, broadcast and alltoall deliver).
  size_t count_wrong_input(int src, const void* buf, size_t count, size_t offset = 0) const noexcept;
  /// The expected result at element i (as double, for messages and tests).
  double expected_at(size_t i) const noexcept;

  /// The input value of `rank` at element `i` before conversion to the type.
  static int64_t input_value(DataType type, ReduceOp op, int rank, size_t i) noexcept;

  DataType type() const noexcept { return type_; }
  int rank() const noexcept { return rank_; }
  int nranks() const noexcept { return nranks_; }

 private:
  DataType type_;
  ReduceOp op_;
  int rank_;
  int nranks_;
  alignas(8) unsigned char input_[kPatternPeriod * 8] = {};
  alignas(8) unsigned char expected_[kPatternPeriod * 8] = {};
};

/// Elements of its send buffer a rank fills with its input for one call of a
/// collective mode with `count` (the count passed; per rank or per peer for
/// reduce_scatter, allgather, alltoall): count * nranks for reduce_scatter and
/// alltoall, 0 for broadcast off the root, else count.
size_t collective_input_elems(Mode mode, size_t count, int nranks, int rank, int root) noexcept;
/// Elements the call writes on this rank: count * nranks for allgather and
/// alltoall, 0 for reduce off the root, else count.
size_t collective_output_elems(Mode mode, size_t count, int nranks, int rank, int root) noexcept;
/// Wrong elements in the collective_output_elems() elements of `out` on rank
/// p.rank() after one call of `mode` (with `count` and `root`) in which every
/// rank's input held collective_input_elems() elements of its fill_input():
///   allreduce, reduce (root): the reduction at 0..count-1;
///   reduce_scatter: the reduction at rank*count..;
///   allgather: block j = rank j's input 0..count-1;
///   broadcast: root's input 0..count-1;
///   alltoall: block j = rank j's input at rank*count.. (its block for this rank).
size_t count_wrong_output(Mode mode, const CheckPattern& p, const void* out, size_t count, int root) noexcept;
/// Overwrites `count` elements with all-ones bytes (NaN for floats, -1 / 255 for
/// integers), so that a call that writes nothing is seen as wrong.
void poison(void* buf, size_t count, DataType type) noexcept;

}  // namespace grex::perf
