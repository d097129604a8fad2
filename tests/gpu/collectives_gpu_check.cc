// SPDX-License-Identifier: Apache-2.0
// GPU buffers in the collectives, on a real GPU (tests/gpu/device-check.sh runs
// it; `meson test gpu_collectives` skips with status 77 where there is none).
//
// Ranks are forked processes on one host (shm backend), all on GPU 0, each
// with its own CUDA context. What it holds grex to:
//   - every stream-ordered collective moves the right bytes: allreduce,
//     broadcast and reduce in several pipelined pieces, reduce_scatter,
//     allgather and alltoall, in place and out of place, against values
//     computed on the host (small integers, so every reduction order is exact);
//   - stream order: the inputs are written by copies queued behind a second of
//     GPU work, and read back by a copy queued after the collective, with no
//     host synchronization in between;
//   - many calls in flight on two streams at once;
//   - reduce leaves non-root receive buffers alone;
//   - host buffers passed with a stream work too;
//   - with GREX_GPU_SYNC=1 (the caller waits) the same results.
// Then, with --bench, the time of a GPU-buffer allreduce against the same
// allreduce on host buffers (median of 7, min-max).
#include <grex/communicator.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/reduce_elem.h"
#include "tests/gpu/gpu_check.h"
#include "tests/integration/shm/harness.h"

using namespace grex;             // NOLINT
using namespace grex::gpu_check;  // NOLINT
namespace elem = grex::elem;

namespace {

std::string g_backend = "shm";  // --backend: dpdk runs memif between the ranks, staged


// allreduce sum and max of f32, out of place and in place, at sizes that make
// 1 and several pieces, inputs written behind busy work.
int check_allreduce(Communicator& c, const Gpu& g, size_t n, bool in_place, ReduceOp op) {
  const int r = c.rank(), size = c.size();
  std::vector<float> in = fill<float>(r, n), out(n, -1.f), want(n);
  for (size_t i = 0; i < n; ++i) {
    double acc = op == ReduceOp::kMax ? -1e300 : 0;
    for (int q = 0; q < size; ++q) acc = op == ReduceOp::kMax ? std::max(acc, value(q, i)) : acc + value(q, i);
    want[i] = static_cast<float>(acc);
  }
  DevBuf din, dout;
  if (dev_alloc(din, n * 4) || dev_alloc(dout, n * 4)) return 1;
  step("allreduce: inputs queued behind busy work");
  if (keep_busy(g, g.s1) || to_dev(g.s1, din, in.data(), n * 4)) return 1;
  void* dst = in_place ? din.ptr() : dout.ptr();
  step("allreduce: calling");
  auto w = c.allreduce(din.ptr(), dst, n, DataType::kFloat32, op, GpuStream{g.s1});
  RANK_OK(w);
  step("allreduce: enqueued; copying the result to the host");
  if (to_host(g.s1, out.data(), in_place ? din : dout, n * 4)) return 1;
  step("allreduce: copy to the host returned; synchronizing");
  CU_OK(A->cuStreamSynchronize(g.s1));
  step("allreduce: stream synchronized; waiting for the Work");
  RANK_OK((*w)->wait());
  step("allreduce: done");
  std::string what = "allreduce " + std::to_string(n) + (in_place ? " in place" : "");
  return expect_eq(what.c_str(), out, want);
}

// allreduce of every element kind with a spread of ops (kernels on the GPU to
// GPU path: avg's scale, wrapping u8, f16 and bf16 through f32). Small
// integers, so each result is exact whatever the order; avg over 2 or 4 ranks
// divides exactly.
template <class T>
T to_kind(double v, DataType t) {
  if (t == DataType::kFloat16) return static_cast<T>(elem::f32_to_f16(static_cast<float>(v)));
  if (t == DataType::kBFloat16) return static_cast<T>(elem::f32_to_bf16(static_cast<float>(v)));
  if (t == DataType::kUint8) return static_cast<T>(static_cast<uint64_t>(v) & 0xff);  // wraps, as the sum does
  return static_cast<T>(v);
}

template <class T>
int check_kind(Communicator& c, const Gpu& g, DataType t, ReduceOp op, size_t n) {
  const int r = c.rank(), size = c.size();
  auto v = [](int q, size_t i) { return static_cast<double>((q + 1) * static_cast<int>(i % 5 + 1)); };
  std::vector<T> in(n), out(n), want(n);
  for (size_t i = 0; i < n; ++i) {
    in[i] = to_kind<T>(v(r, i), t);
    double acc = op == ReduceOp::kProd ? 1 : op == ReduceOp::kMin ? 1e300 : op == ReduceOp::kMax ? -1e300 : 0;
    for (int q = 0; q < size; ++q) {
      const double x = v(q, i);
      acc = op == ReduceOp::kProd ? acc * x : op == ReduceOp::kMin ? std::min(acc, x) : op == ReduceOp::kMax ? std::max(acc, x) : acc + x;
    }
    if (op == ReduceOp::kAvg) acc = t == DataType::kInt32 || t == DataType::kInt64 ? static_cast<double>(static_cast<int64_t>(acc) / size) : acc / size;
    want[i] = to_kind<T>(acc, t);
  }
  DevBuf d;
  if (dev_alloc(d, n * sizeof(T)) || to_dev(g.s2, d, in.data(), n * sizeof(T))) return 1;
  auto w = c.allreduce(d.ptr(), d.ptr(), n, t, op, GpuStream{g.s2});
  RANK_OK(w);
  if (to_host(g.s2, out.data(), d, n * sizeof(T))) return 1;
  CU_OK(A->cuStreamSynchronize(g.s2));
  RANK_OK((*w)->wait());
  std::string what = "allreduce " + std::string(dtype_name(t)) + " " + std::string(reduce_op_name(op));
  return expect_eq(what.c_str(), out, want);
}

int check_kinds(Communicator& c, const Gpu& g) {
  const size_t n = 1'000'003;
  if (check_kind<float>(c, g, DataType::kFloat32, ReduceOp::kAvg, n)) return 1;
  if (check_kind<double>(c, g, DataType::kFloat64, ReduceOp::kProd, n)) return 1;
  if (check_kind<int32_t>(c, g, DataType::kInt32, ReduceOp::kAvg, n)) return 1;
  if (check_kind<int64_t>(c, g, DataType::kInt64, ReduceOp::kMin, n)) return 1;
  if (check_kind<uint8_t>(c, g, DataType::kUint8, ReduceOp::kSum, n)) return 1;
  if (check_kind<uint16_t>(c, g, DataType::kFloat16, ReduceOp::kSum, n)) return 1;
  if (check_kind<uint16_t>(c, g, DataType::kBFloat16, ReduceOp::kAvg, n)) return 1;
  if (check_kind<uint16_t>(c, g, DataType::kBFloat16, ReduceOp::kMax, 7)) return 1;  // fewer elements than ranks' shards
  return 0;
}

// Many calls in flight on two streams, then one synchronization.
int check_in_flight(Communicator& c, const Gpu& g) {
  const int r = c.rank(), size = c.size();
  constexpr int kCalls = 8;
  const size_t n = 300'001;
  std::vector<DevBuf> bufs(kCalls);
  std::vector<std::vector<int64_t>> outs(kCalls, std::vector<int64_t>(n));
  std::vector<std::vector<int64_t>> ins(kCalls);
  std::vector<WorkPtr> works;
  for (int k = 0; k < kCalls; ++k) {
    CUstream s = k % 2 == 0 ? g.s1 : g.s2;
    ins[k] = fill<int64_t>(r + k, n);
    if (dev_alloc(bufs[k], n * 8) || to_dev(s, bufs[k], ins[k].data(), n * 8)) return 1;
    auto w = c.allreduce(bufs[k].ptr(), bufs[k].ptr(), n, DataType::kInt64, ReduceOp::kSum, GpuStream{s});
    RANK_OK(w);
    works.push_back(*w);
    if (to_host(s, outs[k].data(), bufs[k], n * 8)) return 1;
  }
  CU_OK(A->cuStreamSynchronize(g.s1));
  CU_OK(A->cuStreamSynchronize(g.s2));
  for (int k = 0; k < kCalls; ++k) {
    RANK_OK(works[k]->wait());
    std::vector<int64_t> want(n, 0);
    for (int q = 0; q < size; ++q)
      for (size_t i = 0; i < n; ++i) want[i] += static_cast<int64_t>(value(q + k, i));
    if (expect_eq("allreduce in flight", outs[k], want)) return 1;
  }
  return 0;
}

int check_broadcast_reduce(Communicator& c, const Gpu& g) {
  const int r = c.rank(), size = c.size();
  const size_t n = 3'000'005;  // bf16: 6 MB, two pieces
  const int root = size - 1;
  // broadcast of bf16 from the last rank
  std::vector<uint16_t> mine(n), got(n), want(n);
  for (size_t i = 0; i < n; ++i) mine[i] = static_cast<uint16_t>(r * 1000 + i % 977), want[i] = static_cast<uint16_t>(root * 1000 + i % 977);
  DevBuf b;
  if (dev_alloc(b, n * 2) || keep_busy(g, g.s2) || to_dev(g.s2, b, mine.data(), n * 2)) return 1;
  auto w = c.broadcast(b.ptr(), n, DataType::kBFloat16, root, GpuStream{g.s2});
  RANK_OK(w);
  if (to_host(g.s2, got.data(), b, n * 2)) return 1;
  CU_OK(A->cuStreamSynchronize(g.s2));
  RANK_OK((*w)->wait());
  if (expect_eq("broadcast", got, want)) return 1;
  // reduce of u8 max to rank 0; the others' recv buffers stay as they were
  std::vector<uint8_t> in(n), out(n, 0xab), wantr(n);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<uint8_t>((r * 37 + i) % 251);
  for (size_t i = 0; i < n; ++i) {
    uint8_t m = 0;
    for (int q = 0; q < size; ++q) m = std::max<uint8_t>(m, static_cast<uint8_t>((q * 37 + i) % 251));
    wantr[i] = r == 0 ? m : 0xab;
  }
  DevBuf din, dout;
  if (dev_alloc(din, n) || dev_alloc(dout, n)) return 1;
  if (to_dev(g.s1, din, in.data(), n) || to_dev(g.s1, dout, out.data(), n)) return 1;
  auto w2 = c.reduce(din.ptr(), dout.ptr(), n, DataType::kUint8, ReduceOp::kMax, 0, GpuStream{g.s1});
  RANK_OK(w2);
  if (to_host(g.s1, out.data(), dout, n)) return 1;
  CU_OK(A->cuStreamSynchronize(g.s1));
  RANK_OK((*w2)->wait());
  return expect_eq("reduce", out, wantr);
}

int check_blocks(Communicator& c, const Gpu& g) {
  const int r = c.rank(), size = c.size();
  const auto S = static_cast<size_t>(size);
  const size_t n = 100'003;  // elements per rank block
  // reduce_scatter (f64 sum), out of place and in place
  for (int in_place = 0; in_place < 2; ++in_place) {
    std::vector<double> in = fill<double>(r, n * S), out(n), want(n, 0);
    for (int q = 0; q < size; ++q)
      for (size_t i = 0; i < n; ++i) want[i] += value(q, static_cast<size_t>(r) * n + i);
    DevBuf din, dout;
    if (dev_alloc(din, n * S * 8) || dev_alloc(dout, n * 8)) return 1;
    if (keep_busy(g, g.s1, 2) || to_dev(g.s1, din, in.data(), n * S * 8)) return 1;
    void* dst = in_place ? static_cast<void*>(static_cast<uint8_t*>(din.ptr()) + static_cast<size_t>(r) * n * 8) : dout.ptr();
    auto w = c.reduce_scatter(din.ptr(), dst, n, DataType::kFloat64, ReduceOp::kSum, GpuStream{g.s1});
    RANK_OK(w);
    if (in_place ? to_host(g.s1, out.data(), din, n * 8, static_cast<size_t>(r) * n * 8)
                 : to_host(g.s1, out.data(), dout, n * 8))
      return 1;
    CU_OK(A->cuStreamSynchronize(g.s1));
    RANK_OK((*w)->wait());
    if (expect_eq(in_place ? "reduce_scatter in place" : "reduce_scatter", out, want)) return 1;
  }
  // allgather (i32), out of place and in place
  for (int in_place = 0; in_place < 2; ++in_place) {
    std::vector<int32_t> in = fill<int32_t>(r, n), out(n * S), want(n * S);
    for (int q = 0; q < size; ++q)
      for (size_t i = 0; i < n; ++i) want[static_cast<size_t>(q) * n + i] = static_cast<int32_t>(value(q, i));
    DevBuf din, dout;
    if (dev_alloc(din, n * 4) || dev_alloc(dout, n * S * 4)) return 1;
    const size_t mine = static_cast<size_t>(r) * n * 4;
    if (in_place ? to_dev(g.s2, dout, in.data(), n * 4, mine) : to_dev(g.s2, din, in.data(), n * 4)) return 1;
    const void* src = in_place ? static_cast<const void*>(static_cast<uint8_t*>(dout.ptr()) + mine) : din.ptr();
    auto w = c.allgather(src, dout.ptr(), n, DataType::kInt32, GpuStream{g.s2});
    RANK_OK(w);
    if (to_host(g.s2, out.data(), dout, n * S * 4)) return 1;
    CU_OK(A->cuStreamSynchronize(g.s2));
    RANK_OK((*w)->wait());
    if (expect_eq(in_place ? "allgather in place" : "allgather", out, want)) return 1;
  }
  // alltoall (f16 bits moved as they are)
  std::vector<uint16_t> in(n * S), out(n * S), want(n * S);
  for (int q = 0; q < size; ++q)
    for (size_t i = 0; i < n; ++i) {
      in[static_cast<size_t>(q) * n + i] = static_cast<uint16_t>(r * 100 + q * 10 + i % 7);
      want[static_cast<size_t>(q) * n + i] = static_cast<uint16_t>(q * 100 + r * 10 + i % 7);
    }
  DevBuf din, dout;
  if (dev_alloc(din, n * S * 2) || dev_alloc(dout, n * S * 2)) return 1;
  if (to_dev(g.s1, din, in.data(), n * S * 2)) return 1;
  auto w = c.alltoall(din.ptr(), dout.ptr(), n, DataType::kFloat16, GpuStream{g.s1});
  RANK_OK(w);
  if (to_host(g.s1, out.data(), dout, n * S * 2)) return 1;
  CU_OK(A->cuStreamSynchronize(g.s1));
  RANK_OK((*w)->wait());
  return expect_eq("alltoall", out, want);
}

// Host buffers with a stream: the same calls, copies between host memory.
int check_host_buffers(Communicator& c, const Gpu& g) {
  const size_t n = 5'000;
  std::vector<float> buf = fill<float>(c.rank(), n), want(n, 0);
  for (int q = 0; q < c.size(); ++q)
    for (size_t i = 0; i < n; ++i) want[i] += static_cast<float>(value(q, i));
  auto w = c.allreduce(buf.data(), buf.data(), n, DataType::kFloat32, ReduceOp::kSum, GpuStream{g.s1});
  RANK_OK(w);
  RANK_OK((*w)->wait());
  CU_OK(A->cuStreamSynchronize(g.s1));
  if (expect_eq("allreduce of host buffers", buf, want)) return 1;
  // GPU and host memory in one call: refused before anything is enqueued.
  DevBuf d;
  if (dev_alloc(d, n * 4)) return 1;
  auto mixed = c.allreduce(d.ptr(), buf.data(), n, DataType::kFloat32, ReduceOp::kSum, GpuStream{g.s1});
  RANK_CHECK(!mixed.ok() && mixed.error().code() == Errc::kInvalidArgument);
  RANK_CHECK(mixed.error().message().find("mix GPU and host memory") != std::string::npos);
  return 0;
}

// Uneven alltoall with gaps in both buffers (the receive buffer's gaps keep
// their bytes), then send and recv around the ring, 3 MiB each (chunked),
// even ranks sending first: the payload is written behind busy work, read
// back by a copy queued after the receive.
int check_v_p2p(Communicator& c, const Gpu& g) {
  const int r = c.rank(), size = c.size();
  const auto S = static_cast<size_t>(size);
  std::vector<size_t> sc(S), sd(S), rc(S), rd(S);
  size_t sext = 0, rext = 0;
  for (size_t j = 0; j < S; ++j) {
    sc[j] = 1000 * (static_cast<size_t>(r) + j + 1), sd[j] = sext + 7, sext = sd[j] + sc[j];
    rc[j] = 1000 * (j + static_cast<size_t>(r) + 1), rd[j] = rext + 5, rext = rd[j] + rc[j];
  }
  std::vector<float> in(sext, -1.f), out(rext + 3, -7.f), want(rext + 3, -7.f);
  for (size_t j = 0; j < S; ++j) {
    for (size_t i = 0; i < sc[j]; ++i) in[sd[j] + i] = static_cast<float>(r * 1000 + static_cast<int>(j));
    for (size_t i = 0; i < rc[j]; ++i) want[rd[j] + i] = static_cast<float>(static_cast<int>(j) * 1000 + r);
  }
  DevBuf din, dout;
  if (dev_alloc(din, sext * 4) || dev_alloc(dout, out.size() * 4)) return 1;
  if (keep_busy(g, g.s1, 2) || to_dev(g.s1, din, in.data(), sext * 4) || to_dev(g.s1, dout, out.data(), out.size() * 4))
    return 1;
  auto w = c.alltoallv(din.ptr(), sc, sd, dout.ptr(), rc, rd, DataType::kFloat32, GpuStream{g.s1});
  RANK_OK(w);
  if (to_host(g.s1, out.data(), dout, out.size() * 4)) return 1;
  CU_OK(A->cuStreamSynchronize(g.s1));
  RANK_OK((*w)->wait());
  if (expect_eq("alltoallv with gaps", out, want)) return 1;
  // send / recv
  const size_t n = (3u << 20) / 4;
  const int next = (r + 1) % size, prev = (r + size - 1) % size;
  std::vector<float> mine = fill<float>(r, n), got(n, 0.f), from_prev = fill<float>(prev, n);
  DevBuf ds, dr;
  if (dev_alloc(ds, n * 4) || dev_alloc(dr, n * 4)) return 1;
  if (keep_busy(g, g.s2, 2) || to_dev(g.s2, ds, mine.data(), n * 4)) return 1;
  Result<WorkPtr> ws = Error(Errc::kInternal, "unset"), wr = Error(Errc::kInternal, "unset");
  if (r % 2 == 0) {
    ws = c.send(ds.ptr(), n * 4, next, 3, GpuStream{g.s2});
    wr = c.recv(dr.ptr(), n * 4, prev, 3, GpuStream{g.s2});
  } else {
    wr = c.recv(dr.ptr(), n * 4, prev, 3, GpuStream{g.s2});
    ws = c.send(ds.ptr(), n * 4, next, 3, GpuStream{g.s2});
  }
  RANK_OK(ws);
  RANK_OK(wr);
  if (to_host(g.s2, got.data(), dr, n * 4)) return 1;
  CU_OK(A->cuStreamSynchronize(g.s2));
  RANK_OK((*ws)->wait());
  RANK_OK((*wr)->wait());
  return expect_eq("send/recv around the ring", got, from_prev);
}

int check_all(test::Rank& rk) {
  trace.rank = rk.rank;
  step("opening the GPU");
  Gpu g;
  if (open_gpu(g)) return 1;
  start_watchdog();
  CommOptions o;
  o.backend = g_backend;
  auto comm = Communicator::create(rk.bootstrap, o);
  RANK_OK(comm);
  Communicator& c = **comm;
  step("communicator created");
  for (size_t n : {size_t{1}, size_t{1000}, size_t{3'000'001}})
    for (bool in_place : {false, true})
      if (check_allreduce(c, g, n, in_place, in_place ? ReduceOp::kMax : ReduceOp::kSum)) return 1;
  step("kinds and ops");
  if (check_kinds(c, g)) return 1;
  step("in flight");
  if (check_in_flight(c, g)) return 1;
  step("broadcast, reduce");
  if (check_broadcast_reduce(c, g)) return 1;
  step("reduce_scatter, allgather, alltoall");
  if (check_blocks(c, g)) return 1;
  step("alltoallv, send, recv");
  if (check_v_p2p(c, g)) return 1;
  step("host buffers");
  if (check_host_buffers(c, g)) return 1;
  step("empty");
  // The path the allreduces took: GPU to GPU unless staging was asked for
  // (or the caller waits, where the stream cannot wait for the host).
  const bool staged_only = std::getenv("GREX_GPU_STAGING") != nullptr || std::getenv("GREX_GPU_SYNC") != nullptr ||
                           g_backend != "shm";  // GPU to GPU needs every rank on one host's shm
  const CommStats& st = c.stats();
  if (rk.rank == 0) {
    std::printf("  rank 0: %" PRIu64 " calls GPU to GPU, %" PRIu64 " staged\n", st.gpu_direct, st.gpu_staged);
    std::fflush(stdout);
  }
  // With GREX_GPU_IPC_MIN_BYTES=0 every call goes GPU to GPU, unless
  // GREX_GPU_IPC_ALL=0 keeps all but allreduce staged; the defaults let the
  // small calls stage.
  auto env_is = [](const char* v, const char* want) { const char* e = std::getenv(v); return e != nullptr && std::strcmp(e, want) == 0; };
  if (staged_only) {
    RANK_CHECK(st.gpu_direct == 0 && st.gpu_staged > 0);
  } else if (env_is("GREX_GPU_IPC_MIN_BYTES", "0")) {
    // alltoallv, send and recv always stage (check_v_p2p)
    RANK_CHECK(st.gpu_direct > 0);
    RANK_CHECK(env_is("GREX_GPU_IPC_ALL", "0") ? st.gpu_staged > 3 : st.gpu_staged == 3);
  } else {
    RANK_CHECK(st.gpu_direct + st.gpu_staged > 0);
  }
  // An empty allreduce completes too.
  auto w = c.allreduce(nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum, GpuStream{g.s1});
  RANK_OK(w);
  RANK_OK((*w)->wait());
  return 0;
}

// A rank that stops in the middle of GPU-to-GPU calls (their barriers meet on
// the GPUs, so no host collective notices): after one allreduce together, the
// last rank exits (`exits`) or stays alive but calls nothing. Every other
// rank's next allreduce fails, naming that rank, well within twice the
// timeout, and its stream drains (no stream waits for ever on a barrier).
int check_stuck(test::Rank& rk, bool exits) {
  Gpu g;
  if (open_gpu(g)) return 1;
  CommOptions o;
  o.backend = g_backend;
  o.timeout_ms = 2000;
  auto comm = Communicator::create(rk.bootstrap, o);
  RANK_OK(comm);
  Communicator& c = **comm;
  const size_t n = 1 << 20;
  DevBuf d;
  if (dev_alloc(d, n * 4)) return 1;
  auto w = c.allreduce(d.ptr(), d.ptr(), n, DataType::kFloat32, ReduceOp::kSum, GpuStream{g.s1});
  RANK_OK(w);
  CU_OK(A->cuStreamSynchronize(g.s1));
  RANK_OK((*w)->wait());
  RANK_CHECK(c.stats().gpu_direct == 1);
  const int quitter = rk.size - 1;
  if (rk.rank == quitter) {
    if (exits) ::_exit(0);
    ::usleep(6'000'000);  // alive, and in no collective
    return 0;
  }
  const auto t0 = static_cast<double>(now_ns());
  auto w2 = c.allreduce(d.ptr(), d.ptr(), n, DataType::kFloat32, ReduceOp::kSum, GpuStream{g.s1});
  RANK_OK(w2);  // enqueued: the failure comes through the Work
  auto r = (*w2)->wait();
  const double waited_ms = (static_cast<double>(now_ns()) - t0) / 1e6;
  RANK_CHECK(!r.ok());
  const std::string m = r.error().message();
  if (rk.rank == 0)
    std::printf("  rank 0 after %.0f ms: %s\n", waited_ms, m.c_str());
  RANK_CHECK(m.find("rank " + std::to_string(quitter)) != std::string::npos);
  RANK_CHECK(waited_ms < 2 * 2000);
  (void)A->cuStreamSynchronize(g.s1);  // returns: every barrier was released (the data does not count)
  return 0;
}

// Median of 7 timed allreduces (after 2 warm-ups) of `bytes`, host buffers
// (blocking call) against GPU buffers (stream call + stream synchronize).
int bench(test::Rank& rk, size_t bytes) {
  Gpu g;
  if (open_gpu(g)) return 1;
  CommOptions o;
  o.backend = g_backend;
  auto comm = Communicator::create(rk.bootstrap, o);
  RANK_OK(comm);
  Communicator& c = **comm;
  const size_t n = bytes / 4;
  std::vector<float> host = fill<float>(rk.rank, n);
  DevBuf d;
  if (dev_alloc(d, bytes) || to_dev(g.s1, d, host.data(), bytes)) return 1;
  CU_OK(A->cuStreamSynchronize(g.s1));
  std::vector<double> th, tg;
  for (int it = 0; it < 9; ++it) {
    // Alternate, so both see the same noise.
    RANK_OK(c.barrier());
    auto t0 = static_cast<double>(now_ns());
    RANK_OK(c.allreduce(host.data(), n, DataType::kFloat32, ReduceOp::kSum));
    auto t1 = static_cast<double>(now_ns());
    RANK_OK(c.barrier());
    auto t2 = static_cast<double>(now_ns());
    auto w = c.allreduce(d.ptr(), d.ptr(), n, DataType::kFloat32, ReduceOp::kSum, GpuStream{g.s1});
    RANK_OK(w);
    CU_OK(A->cuStreamSynchronize(g.s1));
    auto t3 = static_cast<double>(now_ns());
    RANK_OK((*w)->wait());
    if (it >= 2) th.push_back((t1 - t0) / 1e3), tg.push_back((t3 - t2) / 1e3);
  }
  if (rk.rank == 0) {
    std::sort(th.begin(), th.end());
    std::sort(tg.begin(), tg.end());
    auto med = [](const std::vector<double>& v) { return v[v.size() / 2]; };
    const double gb = static_cast<double>(bytes) / 1e3;
    std::printf("bench allreduce f32 %zu MiB, %d ranks: host %.0f us (%.0f-%.0f), gpu %.0f us (%.0f-%.0f), "
                "gpu/host %.2f; algbw host %.2f GB/s, gpu %.2f GB/s\n",
                bytes >> 20, rk.size, med(th), th.front(), th.back(), med(tg), tg.front(), tg.back(),
                med(tg) / med(th), gb / med(th), gb / med(tg));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

// Options: --bench (timings after the checks), --trace (steps and a
// watchdog), --ranks 1,2,4 (default 2,4), --mode stream|sync|both (default
// both), --timeout S per run (default 240), --backend shm|dpdk (dpdk: memif
// between the ranks, every call staged).
int main(int argc, char** argv) {
  bool do_bench = false;
  std::vector<int> ranks{2, 4};
  std::string mode = "both";
  int timeout_s = 240;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bench") {
      do_bench = true;
    } else if (a == "--trace") {
      trace.on = true;
    } else if (a == "--ranks" && i + 1 < argc) {
      ranks.clear();
      for (std::string v = argv[++i]; !v.empty();) {
        size_t comma = v.find(',');
        ranks.push_back(std::atoi(v.substr(0, comma).c_str()));
        v = comma == std::string::npos ? "" : v.substr(comma + 1);
      }
    } else if (a == "--mode" && i + 1 < argc) {
      mode = argv[++i];
    } else if (a == "--timeout" && i + 1 < argc) {
      timeout_s = std::atoi(argv[++i]);
    } else if (a == "--backend" && i + 1 < argc) {
      g_backend = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--bench] [--trace] [--ranks 1,2,4] [--mode stream|sync|both] [--timeout S] "
                   "[--backend shm|dpdk]\n",
                   argv[0]);
      return 2;
    }
  }
  // The parent never initializes CUDA (the ranks are forked): a one-rank
  // probe says whether there is a GPU.
  auto probe = test::run_ranks(1, [](test::Rank&) {
    auto api = gpu::cuda();
    if (!api) {
      std::printf("SKIP: %s\n", api.error().message().c_str());
      return 77;
    }
    if ((*api)->device_count == 0) {
      std::printf("SKIP: the CUDA driver sees no GPU\n");
      return 77;
    }
    return 0;
  });
  if (probe.codes[0] == 77) return 77;
  if (probe.codes[0] != 0) {
    std::printf("FAIL: the GPU probe died (%s)\n", probe.describe().c_str());
    return 1;
  }
  int failed = 0;
  struct Mode {
    const char* name;
    std::vector<std::pair<const char*, const char*>> env;
  };
  const char* kVars[] = {"GREX_GPU_IPC_BYTES", "GREX_GPU_STAGING", "GREX_GPU_SYNC", "GREX_GPU_IPC_ALL",
                         "GREX_GPU_IPC_MIN_BYTES", "GREX_GPU_IPC_SYNC"};
  std::vector<Mode> modes;
  const std::pair<const char*, const char*> every{"GREX_GPU_IPC_MIN_BYTES", "0"};  // small calls too
  if ((mode == "both" || mode == "stream") && g_backend != "shm") {
    modes.push_back({"stream waits (staged: GPU to GPU needs shm)", {}});
  } else if (mode == "both" || mode == "stream") {
    modes.push_back({"stream waits, defaults", {}});
    modes.push_back({"GPU to GPU, barriers on the GPUs", {every}});
    modes.push_back({"GPU to GPU in 1 MiB pieces", {every, {"GREX_GPU_IPC_BYTES", "1048576"}}});
    modes.push_back({"GPU to GPU, barriers on the host (GREX_GPU_IPC_SYNC=host)", {every, {"GREX_GPU_IPC_SYNC", "host"}}});
    modes.push_back({"GPU to GPU, host barriers, 1 MiB pieces",
                     {every, {"GREX_GPU_IPC_SYNC", "host"}, {"GREX_GPU_IPC_BYTES", "1048576"}}});
    modes.push_back({"only allreduce GPU to GPU (GREX_GPU_IPC_ALL=0)", {every, {"GREX_GPU_IPC_ALL", "0"}}});
    modes.push_back({"staged (GREX_GPU_STAGING=1)", {{"GREX_GPU_STAGING", "1"}}});
  }
  if (mode == "both" || mode == "sync") modes.push_back({"caller waits (GREX_GPU_SYNC=1)", {{"GREX_GPU_SYNC", "1"}}});
  for (const Mode& md : modes) {
    for (const char* v : kVars) ::unsetenv(v);
    for (auto [var, value] : md.env) ::setenv(var, value, 1);
    const char* m = md.name;
    for (int n : ranks) {
      auto t0 = static_cast<double>(now_ns());
      auto res = test::run_ranks(n, check_all, timeout_s);
      std::printf("%s: GPU collectives, %d ranks over %s, %s: %s (%.1f s)\n", res.all_ok() ? "PASS" : "FAIL", n,
                  g_backend.c_str(), m,
                  res.all_ok() ? "every collective and case" : res.describe().c_str(), (static_cast<double>(now_ns()) - t0) / 1e9);
      std::fflush(stdout);
      failed += res.all_ok() ? 0 : 1;
    }
  }
  for (const char* v : kVars) ::unsetenv(v);
  if (g_backend == "shm" && (mode == "both" || mode == "stream")) {
    ::setenv("GREX_GPU_IPC_MIN_BYTES", "0", 1);
    for (bool exits : {true, false})
      for (int n : ranks) {
        if (n < 2) continue;
        auto res = test::run_ranks(n, [exits](test::Rank& rk) { return check_stuck(rk, exits); }, 60);
        std::printf("%s: GPU to GPU, %d ranks, the last %s: %s\n", res.all_ok() ? "PASS" : "FAIL", n,
                    exits ? "exits" : "stops calling",
                    res.all_ok() ? "the others fail naming it, in time, and their streams drain"
                                 : res.describe().c_str());
        std::fflush(stdout);
        failed += res.all_ok() ? 0 : 1;
      }
    ::unsetenv("GREX_GPU_IPC_MIN_BYTES");
  }
  if (do_bench) {
    std::vector<const char*> paths{"GPU to GPU", "staged"};
    if (g_backend != "shm") paths = {"staged over dpdk"};
    for (const char* path : paths) {
      if (std::strncmp(path, "staged", 6) == 0) ::setenv("GREX_GPU_STAGING", "1", 1);
      for (size_t mib : {4, 64, 256}) {
        std::printf("%s: ", path);
        std::fflush(stdout);
        auto res = test::run_ranks(2, [mib](test::Rank& rk) { return bench(rk, mib << 20); }, 240);
        if (!res.all_ok()) {
          std::printf("FAIL: bench %zu MiB: %s\n", mib, res.describe().c_str());
          ++failed;
        }
      }
    }
    ::unsetenv("GREX_GPU_STAGING");
  }
  return failed == 0 ? 0 : 1;
}
