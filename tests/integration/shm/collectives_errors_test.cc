// SPDX-License-Identifier: Apache-2.0
// Ranks that call different collectives, or the same one with different
// counts or dtypes, over shm: every algorithm that can tells them apart at
// once (direct's descriptors, the flat and staged slots' signatures) and
// names both calls in a kMismatch; the others name them after the timeout.
#include <gtest/gtest.h>

#include <signal.h>
// The test below swaps in a failing RAND_METHOD, an API OpenSSL 3 deprecates.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/rand.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu/cuda_api.h"
#include "harness.h"
#include "shm_opts.h"

namespace grex::test {
namespace {

// Ranks that disagree on the dtype (same byte count, so the data alone would
// not tell): their tags differ, the call times out, and the error names both
// calls instead of a bare timeout.
// With the direct algorithm the first message of the call carries count,
// dtype and op: ranks that disagree fail at once (long before the timeout).
// At least one rank names both calls; the others name it or the calls too.
constexpr int kLearnedFromPeer = 7;

// 0 if `e` is a kMismatch whose message names both calls, `a` and `b`.
int names_both_calls(int rank, const Result<void>& e, const char* a, const char* b) {
  RANK_CHECK(!e);
  std::fprintf(stderr, "rank %d: %s\n", rank, e.error().message().c_str());
  RANK_CHECK(e.error().code() == Errc::kMismatch);
  RANK_CHECK(e.error().message().find(a) != std::string::npos);
  RANK_CHECK(e.error().message().find(b) != std::string::npos);
  return 0;
}  // exit code: this rank failed through a peer's abort

TEST(Errors, RanksDisagreeingOnCountFailAtOnceWithDirect) {
  auto res = run_ranks(3, [](Rank& r) -> int {
    CommOptions o = opts_for("direct");
    o.timeout_ms = 60'000;
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    const size_t count = r.rank == 2 ? 300'000 : 200'000;
    std::vector<float> v(count, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    auto e = c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RANK_CHECK(!e);
    std::fprintf(stderr, "rank %d after %.3f s: %s\n", r.rank, s, e.error().message().c_str());
    RANK_CHECK(s < 10);  // not the 60 s timeout
    // A rank that sees the mismatch names both calls. A rank whose peer saw it
    // first may instead learn of that peer's abort (directly, or reported by
    // another rank), and names the peer to look at.
    if (e.error().code() == Errc::kPeerFailed) {
      RANK_CHECK(e.error().message().find("look at rank ") != std::string::npos);
      return kLearnedFromPeer;
    }
    RANK_CHECK(e.error().code() == Errc::kMismatch);
    RANK_CHECK(e.error().message().find("allreduce count=300000 f32 sum") != std::string::npos);
    RANK_CHECK(e.error().message().find("allreduce count=200000 f32 sum") != std::string::npos);
    return 0;
  }, 120);
  int saw = 0;
  for (int code : res.codes) {
    EXPECT_TRUE(code == 0 || code == kLearnedFromPeer) << res.describe();
    saw += code == 0 ? 1 : 0;
  }
  EXPECT_GE(saw, 1) << "no rank reported the mismatch itself: " << res.describe();
}

// Flat reads each peer's count, dtype and op beside its data: ranks that
// disagree fail at once, every one of them naming both calls.
TEST(Errors, RanksDisagreeingOnCountFailAtOnceWithFlat) {
  auto res = run_ranks(3, [](Rank& r) -> int {
    CommOptions o = opts_for("flat");
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    RANK_CHECK(c->allreduce_algorithm(404) == std::string("flat"));
    const size_t count = r.rank == 2 ? 101 : 100;
    std::vector<float> v(count, 1.0f);
    RANK_OK(c->allreduce(v.data(), 100, DataType::kFloat32, ReduceOp::kSum));  // all agree first
    const auto t0 = std::chrono::steady_clock::now();
    auto e = c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RANK_CHECK(s < 10);  // not the 60 s timeout
    return names_both_calls(r.rank, e, "allreduce count=101 f32 sum", "allreduce count=100 f32 sum");
  }, 120);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// The flat barrier shares the slots: a rank in a barrier and one in a flat
// allreduce fail at once, each naming both calls.
TEST(Errors, BarrierAgainstFlatAllreduceIsNamed) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto c = make_comm(r, opts_for("auto"));
    RANK_CHECK(c != nullptr);
    RANK_OK(c->barrier());
    float v[4] = {1, 2, 3, 4};
    auto e = r.rank == 0 ? c->barrier() : c->allreduce(v, 4, DataType::kFloat32, ReduceOp::kSum);
    return names_both_calls(r.rank, e, "called barrier", "called allreduce count=4 f32 sum");
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Staged, the signature travels beside every published block: ranks that
// disagree on the count fail at once, naming both calls. As with direct, a
// rank whose peer saw the mismatch first may learn of that peer's abort
// instead (seen once in CI: rank 1 of 3), and names the peer to look at.
TEST(Errors, RanksDisagreeingOnCountFailAtOnceWhenStaged) {
  auto res = run_ranks(3, [](Rank& r) -> int {
    CommOptions o = opts_for("staged");
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    const size_t count = r.rank == 1 ? 70'001 : 70'000;
    std::vector<float> v(count, 1.0f);
    RANK_OK(c->allreduce(v.data(), 70'000, DataType::kFloat32, ReduceOp::kSum));  // all agree first
    const auto t0 = std::chrono::steady_clock::now();
    auto e = c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RANK_CHECK(s < 10);  // not the 60 s timeout
    if (!e && e.error().code() == Errc::kPeerFailed) {
      RANK_CHECK(e.error().message().find("look at rank ") != std::string::npos);
      return kLearnedFromPeer;
    }
    return names_both_calls(r.rank, e, "allreduce count=70001 f32 sum", "allreduce count=70000 f32 sum");
  }, 120);
  int saw = 0;
  for (int code : res.codes) {
    EXPECT_TRUE(code == 0 || code == kLearnedFromPeer) << res.describe();
    saw += code == 0 ? 1 : 0;
  }
  EXPECT_GE(saw, 1) << "no rank reported the mismatch itself: " << res.describe();
}

TEST(Errors, RanksDisagreeingOnDtypeAreNamed) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto c = make_comm(r, opts_for("ring", 1500));
    RANK_CHECK(c != nullptr);
    std::vector<int32_t> v(1000, 1);
    auto e = c->allreduce(v.data(), v.size(), r.rank == 0 ? DataType::kFloat32 : DataType::kInt32, ReduceOp::kSum);
    return names_both_calls(r.rank, e, "allreduce count=1000 f32 sum", "allreduce count=1000 i32 sum");
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// alltoallv: a pair whose counts disagree fails with kMismatch naming both
// counts (rank 1 expects one element more from rank 0 than rank 0 sends);
// wrong-length arrays and in-place calls are refused before anything moves.
TEST(Errors, AlltoallvCountsThatDisagreeAreNamed) {
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto c = make_comm(r, opts_for("ring", 5000));
    RANK_CHECK(c != nullptr);
    std::vector<float> in(8, 1.0f), out(8, 0.0f);
    std::vector<size_t> one{1}, sc{2, 2}, sd{0, 2}, rc{2, r.rank == 1 ? size_t{3} : size_t{2}}, rd{0, 4};
    auto bad = c->alltoallv(in.data(), one, one, out.data(), one, one, DataType::kFloat32);
    RANK_CHECK(!bad && bad.error().code() == Errc::kInvalidArgument);
    bad = c->alltoallv(in.data(), sc, sd, in.data(), rc, rd, DataType::kFloat32);
    RANK_CHECK(!bad && bad.error().code() == Errc::kInvalidArgument);
    if (r.rank == 1) rc = {3, 2}, rd = {0, 4};  // expects 3 from rank 0, which sends 2
    auto e = c->alltoallv(in.data(), sc, sd, out.data(), rc, rd, DataType::kFloat32);
    RANK_CHECK(!e);
    std::fprintf(stderr, "rank %d: %s\n", r.rank, e.error().message().c_str());
    if (r.rank == 1) {
      RANK_CHECK(e.error().code() == Errc::kMismatch);
      RANK_CHECK(e.error().message().find("rank 0 sends 8 bytes to rank 1, which expects 12") != std::string::npos);
    }
    return 0;
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Without entropy the communicator id (which names its shared memory) would
// be whatever the stack held: creation fails and says why instead.
TEST(Errors, RandBytesFailureFailsCreation) {
  auto res = run_ranks(1, [](Rank& r) -> int {
    static RAND_METHOD failing{};
    failing.bytes = [](unsigned char*, int) { return 0; };
    RANK_CHECK(RAND_set_rand_method(&failing) == 1);
    auto c = Communicator::create(r.bootstrap, opts_for("ring"));
    RANK_CHECK(!c.ok());
    RANK_CHECK(c.error().code() == Errc::kSystem);
    RANK_CHECK(c.error().message().find("RAND_bytes") != std::string::npos);
    return 0;
  });
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// The stream-ordered (GPU) calls on a host without CUDA: a clean kNotFound
// naming the missing driver and the rank, nothing enqueued, and the
// communicator goes on working (the ranks still agree on every later call).
TEST(Errors, GpuCallsWithoutCudaSayNoDriver) {
  if (gpu::cuda()) GTEST_SKIP() << "this host has a CUDA driver: tests/gpu/collectives_gpu_check runs instead";
  auto res = run_ranks(2, [](Rank& r) -> int {
    auto c = make_comm(r, opts_for("auto"));
    RANK_CHECK(c != nullptr);
    float v[4] = {1, 2, 3, 4};
    auto w = c->allreduce(v, v, 4, DataType::kFloat32, ReduceOp::kSum, GpuStream{});
    RANK_CHECK(!w.ok());
    RANK_CHECK(w.error().code() == Errc::kNotFound);
    const std::string m = w.error().message();
    RANK_CHECK(m.find("no CUDA driver") != std::string::npos);
    RANK_CHECK(m.find("allreduce") != std::string::npos);
    RANK_CHECK(m.find("rank " + std::to_string(r.rank)) != std::string::npos);
    RANK_CHECK(!c->broadcast(v, 4, DataType::kFloat32, 0, GpuStream{}).ok());
    RANK_CHECK(!c->allgather(v, v, 1, DataType::kFloat32, GpuStream{}).ok());
    const size_t cnt[2] = {1, 1}, disp[2] = {0, 1};
    float out[2] = {0, 0};
    auto av = c->alltoallv(v, cnt, disp, out, cnt, disp, DataType::kFloat32, GpuStream{});
    RANK_CHECK(!av.ok() && av.error().code() == Errc::kNotFound);
    RANK_CHECK(av.error().message().find("alltoallv") != std::string::npos);
    auto sw = c->send(v, 4, 1 - r.rank, 0, GpuStream{});
    RANK_CHECK(!sw.ok() && sw.error().code() == Errc::kNotFound && sw.error().message().find("send") != std::string::npos);
    auto rw = c->recv(v, 4, 1 - r.rank, 0, GpuStream{});
    RANK_CHECK(!rw.ok() && rw.error().code() == Errc::kNotFound && rw.error().message().find("recv") != std::string::npos);
    auto srw = c->sendrecv(v, 4, 1 - r.rank, out, 4, 1 - r.rank, 0, GpuStream{});
    RANK_CHECK(!srw.ok() && srw.error().code() == Errc::kNotFound);
    // Arguments are checked first, CUDA or not.
    auto bad = c->send(v, 4, r.rank, 0, GpuStream{});
    RANK_CHECK(!bad.ok() && bad.error().code() == Errc::kInvalidArgument);
    RANK_OK(c->allreduce(v, 4, DataType::kFloat32, ReduceOp::kSum));
    RANK_CHECK(v[0] == 2 && v[3] == 8);
    return 0;
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// A malformed GREX_GPU_* value is an error naming the variable, before any
// CUDA call, as for every GREX_* variable.
TEST(Errors, MalformedGpuVariableIsNamed) {
  auto res = run_ranks(1, [](Rank& r) -> int {
    ::setenv("GREX_GPU_CHUNK_BYTES", "lots", 1);
    auto c = make_comm(r, opts_for("auto"));
    RANK_CHECK(c != nullptr);
    float v[4] = {1, 2, 3, 4};
    auto w = c->allreduce(v, v, 4, DataType::kFloat32, ReduceOp::kSum, GpuStream{});
    RANK_CHECK(!w.ok());
    RANK_CHECK(w.error().message().find("GREX_GPU_CHUNK_BYTES") != std::string::npos);
    ::unsetenv("GREX_GPU_CHUNK_BYTES");
    ::setenv("GREX_GPU_IPC_SYNC", "sometimes", 1);
    auto c2 = make_comm(r, opts_for("auto"));
    RANK_CHECK(c2 != nullptr);
    auto w2 = c2->allreduce(v, v, 4, DataType::kFloat32, ReduceOp::kSum, GpuStream{});
    ::unsetenv("GREX_GPU_IPC_SYNC");
    RANK_CHECK(!w2.ok());
    RANK_CHECK(w2.error().message().find("GREX_GPU_IPC_SYNC='sometimes'") != std::string::npos);
    return 0;
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

// Issue 28: a rank stopped with SIGSTOP (alive, silent: not a crash the
// transport sees) is named by the others' timeout. Rank 0 then wakes it.
TEST(Errors, StoppedRankIsNamedByTheTimeout) {
  auto res = run_ranks(3, [](Rank& r) -> int {
    CommOptions o = opts_for("ring");
    o.timeout_ms = 2'000;
    auto c = make_comm(r, o);
    RANK_CHECK(c != nullptr);
    auto pids = r.bootstrap->all_gather("stop/pid", std::to_string(::getpid()));
    RANK_OK(pids);
    std::vector<float> v(1 << 16, 1.0f);
    RANK_OK(c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));  // everyone is up
    RANK_OK(r.bootstrap->barrier("stop/ready"));
    if (r.rank == 2) {
      ::raise(SIGSTOP);  // until rank 0 sends SIGCONT
      return 0;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto e = c->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Rank 2 takes no part in a barrier while stopped: the survivors meet by key.
    if (r.rank == 0) {
      RANK_OK(r.bootstrap->store().get("stop/failed1", 20'000));  // rank 1 is past its error too
      ::kill(static_cast<pid_t>(std::stol((*pids)[2])), SIGCONT);
    } else {
      RANK_OK(r.bootstrap->store().set("stop/failed1", "1"));
    }
    RANK_CHECK(!e);
    std::fprintf(stderr, "rank %d after %.3f s: %s\n", r.rank, s, e.error().message().c_str());
    RANK_CHECK(s < 2 * 2.0 + 1);  // within twice the timeout
    RANK_CHECK(e.error().message().find("rank 2") != std::string::npos);
    return 0;
  }, 60);
  EXPECT_TRUE(res.all_ok()) << res.describe();
}

}  // namespace
}  // namespace grex::test
