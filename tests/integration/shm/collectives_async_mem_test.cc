// SPDX-License-Identifier: Apache-2.0
// Memory calls while non-blocking collectives run: Communicator::alloc/free,
// register_memory/deregister_memory and the C API's grex_mem_* use the
// Device, which the worker thread drives meanwhile; they must queue behind
// the async work (transport.h: one thread per Device) and every allreduce
// must still give the right sums. The ThreadSanitizer build
// (run-tests.sh --tsan) turns a call that skips the queue into a failure.
#include <gtest/gtest.h>
#include <grex/grex.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "shm_opts.h"

namespace grex::test {
namespace {

constexpr int kRanks = 3;
constexpr int kRounds = 5;
constexpr int kInFlight = 4;
// Small vectors take flat (load/store), large ones ring or direct: both
// paths run on the worker while the caller allocates.
constexpr size_t kCounts[kInFlight] = {1000, 300'000, 7, 1u << 20};

// Rank r's element i in call k of round t; the sum over ranks is below.
int32_t contribution(int r, size_t i, int k, int t) { return (r + 1) * static_cast<int32_t>(i % 5 + 1) + k + t; }
int32_t expected_sum(size_t i, int k, int t) {
  return kRanks * (kRanks + 1) / 2 * static_cast<int32_t>(i % 5 + 1) + kRanks * (k + t);
}

// Checks every 97th element and the last one.
bool sums_ok(const int32_t* v, size_t n, int k, int t) {
  for (size_t i = 0; i < n; i += 97)
    if (v[i] != expected_sum(i, k, t)) return false;
  return n == 0 || v[n - 1] == expected_sum(n - 1, k, t);
}

int communicator_rank(Rank& r, const char* algo) {
  auto c = make_comm(r, opts_for(algo));
  RANK_CHECK(c != nullptr);
  // Call 0 runs on memory from alloc(), made while the previous round ran.
  auto first = c->alloc(kCounts[0] * sizeof(int32_t));
  RANK_OK(first);
  auto* shared = static_cast<int32_t*>(*first);
  std::vector<std::vector<int32_t>> bufs(kInFlight);
  std::vector<int32_t> host(1 << 16, 7);
  for (int t = 0; t < kRounds; ++t) {
    int32_t* data[kInFlight];
    for (int k = 0; k < kInFlight; ++k) {
      bufs[k].resize(kCounts[k]);
      data[k] = k == 0 ? shared : bufs[k].data();
      for (size_t i = 0; i < kCounts[k]; ++i) data[k][i] = contribution(r.rank, i, k, t);
    }
    // Call 1's buffer registered up front; dropped while the call runs.
    auto reg = c->register_memory(data[1], kCounts[1] * sizeof(int32_t));
    RANK_OK(reg);
    std::vector<WorkPtr> work;
    for (int k = 0; k < kInFlight; ++k) {
      auto w = c->allreduce_async(data[k], data[k], kCounts[k], DataType::kInt32, ReduceOp::kSum);
      RANK_OK(w);
      work.push_back(*w);
    }
    // While they run (before anything below waits for them): the counters.
    RANK_CHECK(c->stats().collectives <= static_cast<uint64_t>((t + 1) * kInFlight));
    // Then alloc, write, free; register and drop a buffer of our own; the
    // next round's shared buffer (each waits for the allreduces).
    auto tmp = c->alloc(256 * 1024);
    RANK_OK(tmp);
    std::memset(*tmp, t, 256 * 1024);
    RANK_OK(c->free(*tmp));
    auto hr = c->register_memory(host.data(), host.size() * sizeof(int32_t));
    RANK_OK(hr);
    RANK_OK(c->deregister_memory(*hr));
    RANK_OK(c->deregister_memory(*reg));
    auto next = c->alloc(kCounts[0] * sizeof(int32_t));
    RANK_OK(next);
    for (auto& w : work) RANK_OK(w->wait());
    for (int k = 0; k < kInFlight; ++k) RANK_CHECK(sums_ok(data[k], kCounts[k], k, t));
    RANK_OK(c->free(shared));
    shared = static_cast<int32_t*>(*next);
  }
  RANK_OK(c->free(shared));
  RANK_CHECK(c->stats().collectives == static_cast<uint64_t>(kRounds * kInFlight));
  return 0;
}

TEST(AsyncMemory, AllocFreeAndRegisterWhileAllreducesRun) {
  for (const char* algo : {"auto", "ring"}) {
    SCOPED_TRACE(algo);
    auto res = run_ranks(kRanks, [algo](Rank& r) { return communicator_rank(r, algo); }, 300);
    EXPECT_TRUE(res.all_ok()) << res.describe();
  }
}

#define C_OK(expr)                                                                                     \
  do {                                                                                                 \
    grex_result_t c_ok_rc_ = (expr);                                                                   \
    if (c_ok_rc_ != GREX_OK) {                                                                         \
      std::fprintf(stderr, "%s:%d: %s = %d: %s\n", __FILE__, __LINE__, #expr, static_cast<int>(c_ok_rc_), \
                   grex_last_error_message());                                                         \
      return 1;                                                                                        \
    }                                                                                                  \
  } while (0)

// The same through the C API, joined through the environment as grex-run
// would set it (the harness's store, a second client).
int capi_rank(Rank& r) {
  ::setenv("GREX_RANK", std::to_string(r.rank).c_str(), 1);
  ::setenv("GREX_WORLD_SIZE", std::to_string(r.size).c_str(), 1);
  ::setenv("GREX_STORE_ADDR", ("127.0.0.1:" + std::to_string(r.store_port)).c_str(), 1);
  ::setenv("GREX_STORE_EXTERNAL", "1", 1);
  ::setenv("GREX_JOB_TOKEN", r.job_token.c_str(), 1);
  ::setenv("GREX_COST", "5,5,5", 1);
  grex_comm_t* c = nullptr;
  C_OK(grex_comm_init_env(&c));
  std::vector<std::vector<int32_t>> bufs(kInFlight);
  std::vector<int32_t> host(1 << 16, 7);
  for (int t = 0; t < kRounds; ++t) {
    for (int k = 0; k < kInFlight; ++k) {
      bufs[k].resize(kCounts[k]);
      for (size_t i = 0; i < kCounts[k]; ++i) bufs[k][i] = contribution(r.rank, i, k, t);
    }
    C_OK(grex_mem_register(c, bufs[1].data(), kCounts[1] * sizeof(int32_t)));
    grex_work_t* work[kInFlight] = {};
    for (int k = 0; k < kInFlight; ++k)
      C_OK(grex_allreduce_async(c, bufs[k].data(), bufs[k].data(), kCounts[k], GREX_INT32, GREX_SUM, &work[k]));
    void* p = nullptr;
    C_OK(grex_mem_alloc(c, 128 * 1024, &p));
    std::memset(p, t, 128 * 1024);
    C_OK(grex_mem_register(c, host.data(), host.size() * sizeof(int32_t)));
    C_OK(grex_mem_deregister(c, bufs[1].data()));
    C_OK(grex_mem_deregister(c, host.data()));
    C_OK(grex_mem_free(c, p));
    for (auto* w : work) {
      C_OK(grex_work_wait(w));
      grex_work_free(w);
    }
    for (int k = 0; k < kInFlight; ++k) RANK_CHECK(sums_ok(bufs[k].data(), kCounts[k], k, t));
  }
  // A registration left for grex_comm_destroy, with an allreduce on it in flight.
  C_OK(grex_mem_register(c, host.data(), host.size() * sizeof(int32_t)));
  grex_work_t* last = nullptr;
  C_OK(grex_allreduce_async(c, bufs[3].data(), bufs[3].data(), kCounts[3], GREX_INT32, GREX_SUM, &last));
  C_OK(grex_work_wait(last));
  grex_work_free(last);
  C_OK(grex_comm_destroy(c));
  return 0;
}

TEST(AsyncMemory, CApiRegisterAllocWhileAllreducesRun) {
  auto res = run_ranks(kRanks, capi_rank, 300);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
}  // namespace grex::test
