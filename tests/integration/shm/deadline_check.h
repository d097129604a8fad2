// SPDX-License-Identifier: Apache-2.0
// The deadline allreduce (AllreduceOptions::deadline_ms) on whatever backend
// `o` names: shm and dpdk run it alike.
#pragma once

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"

namespace grex::test {

/// Every rank's view of one call, compared through the store: the
/// contributors and the result's bytes must be the same on every rank.
inline bool same_everywhere(Rank& r, const std::string& name, const std::vector<int>& in, const void* p,
                            size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  std::string mine = std::to_string(h) + ":";
  for (int x : in) mine += std::to_string(x) + ",";
  auto all = r.bootstrap->all_gather(name, mine);
  if (!all) return false;
  for (const auto& v : *all)
    if (v != mine) {
      std::fprintf(stderr, "rank %d: '%s' against '%s'\n", r.rank, mine.c_str(), v.c_str());
      return false;
    }
  return true;
}

/// Marks this rank's call `name` returned, for `wait_returned`.
inline bool mark_returned(Rank& r, const std::string& name) {
  return r.bootstrap->store().set(name + "/" + std::to_string(r.rank), "1").ok();
}

/// Waits until every rank in [first, end) marked call `name` returned: a rank
/// entering after that is late for certain, whatever the scheduler did (4
/// ranks share 2 cores here, and under TCG in the Soft-RoCE guest a sleep
/// does not bound how late another process gets to run).
inline bool wait_returned(Rank& r, const std::string& name, int first, int end) {
  std::vector<std::string> keys;
  for (int p = first; p < end; ++p) keys.push_back(name + "/" + std::to_string(p));
  return r.bootstrap->store().wait(keys, 60'000).ok();
}

/// 1. Every rank in time (deadline 10 s): every rank contributes. 2. The
/// last rank late (it enters once the others' calls returned; deadline 1 s,
/// the others' margin to enter): the others' sum (avg over them), on every
/// rank, the late one included; with kCarry its vector joins its next call.
/// 3. Every rank late but the first (deadline 30 ms; rank r enters once rank
/// r - 1's call returned): rank 0 alone contributes and nobody waits for the
/// ranks behind it (were it to wait, the next rank would never enter). `n`
/// elements.
inline int deadline_rank(Rank& r, CommOptions o, size_t n) {
  auto c = make_comm(r, o);
  RANK_CHECK(c != nullptr);
  const int size = r.size, last = size - 1;
  auto value = [](int rank, uint32_t call, size_t i) { return static_cast<int32_t>(rank * 1000 + call * 10 + i % 7); };
  std::vector<int32_t> x(n), y(n);
  std::vector<int> in;
  AllreduceOptions d;
  d.deadline_ms = 10'000;
  d.contributors = &in;
  // 1. In time.
  for (size_t i = 0; i < n; ++i) x[i] = value(r.rank, 1, i);
  RANK_OK(c->allreduce(x.data(), y.data(), n, DataType::kInt32, ReduceOp::kSum, d));
  RANK_CHECK(static_cast<int>(in.size()) == size);
  for (size_t i = 0; i < n; ++i) {
    int32_t want = 0;
    for (int p = 0; p < size; ++p) want += value(p, 1, i);
    RANK_CHECK(y[i] == want);
  }
  RANK_CHECK(same_everywhere(r, "dl1", in, y.data(), n * 4));
  // 2. The last rank late, its vector carried; then in time with it.
  d.late = LateInput::kCarry;
  d.feedback_key = x.data();
  d.deadline_ms = 1000;
  if (r.rank == last) RANK_CHECK(wait_returned(r, "dl2/back", 0, last));
  for (size_t i = 0; i < n; ++i) x[i] = value(r.rank, 2, i);
  RANK_OK(c->allreduce(x.data(), y.data(), n, DataType::kInt32, ReduceOp::kSum, d));
  if (r.rank != last) RANK_CHECK(mark_returned(r, "dl2/back"));
  RANK_CHECK(static_cast<int>(in.size()) == size - 1 && in.back() == last - 1);
  for (size_t i = 0; i < n; ++i) {
    int32_t want = 0;
    for (int p = 0; p < last; ++p) want += value(p, 2, i);
    RANK_CHECK(y[i] == want);
  }
  RANK_CHECK(same_everywhere(r, "dl2", in, y.data(), n * 4));
  d.deadline_ms = 10'000;
  for (size_t i = 0; i < n; ++i) x[i] = value(r.rank, 3, i);
  RANK_OK(c->allreduce(x.data(), y.data(), n, DataType::kInt32, ReduceOp::kSum, d));
  RANK_CHECK(static_cast<int>(in.size()) == size);
  for (size_t i = 0; i < n; ++i) {
    int32_t want = value(last, 2, i);  // carried from the call it missed
    for (int p = 0; p < size; ++p) want += value(p, 3, i);
    RANK_CHECK(y[i] == want);
  }
  RANK_CHECK(same_everywhere(r, "dl3", in, y.data(), n * 4));
  // Avg over the contributors, the last rank late again (dropped this time).
  d.late = LateInput::kDrop;
  d.deadline_ms = 1000;
  std::vector<float> f(n, static_cast<float>(r.rank + 1)), g(n);
  if (r.rank == last) RANK_CHECK(wait_returned(r, "dl4/back", 0, last));
  RANK_OK(c->allreduce(f.data(), g.data(), n, DataType::kFloat32, ReduceOp::kAvg, d));
  if (r.rank != last) RANK_CHECK(mark_returned(r, "dl4/back"));
  RANK_CHECK(static_cast<int>(in.size()) == size - 1);
  for (size_t i = 0; i < n; ++i) RANK_CHECK(g[i] == static_cast<float>(size) / 2.0f);  // mean of 1..size-1
  RANK_CHECK(same_everywhere(r, "dl4", in, g.data(), n * 4));
  // 3. Every rank late but the first.
  d.deadline_ms = 30;
  if (r.rank > 0) RANK_CHECK(wait_returned(r, "dl5/back", r.rank - 1, r.rank));
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) x[i] = value(r.rank, 5, i);
  RANK_OK(c->allreduce(x.data(), y.data(), n, DataType::kInt32, ReduceOp::kSum, d));
  RANK_CHECK(mark_returned(r, "dl5/back"));
  RANK_CHECK(in.size() == 1 && in[0] == 0);
  for (size_t i = 0; i < n; ++i) RANK_CHECK(y[i] == value(0, 5, i));
  RANK_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  RANK_CHECK(same_everywhere(r, "dl5", in, y.data(), n * 4));
  // A plain collective afterwards still meets every rank.
  RANK_OK(c->barrier());
  float one = 1;
  RANK_OK(c->allreduce(&one, 1, DataType::kFloat32, ReduceOp::kSum));
  RANK_CHECK(one == static_cast<float>(size));
  return 0;
}

}  // namespace grex::test
