// SPDX-License-Identifier: Apache-2.0
// Allreduce of GPU buffers from GPU to GPU, with no host bounce, where every
// rank is on one host (the shm backend): each rank owns a scratch buffer in
// device memory that every other rank maps through CUDA IPC, and grex's
// reduction kernels read the peers' scratch directly (NVLink or PCIe peer
// access between GPUs; the same memory where ranks share one GPU).
//
// Per piece of at most the scratch's size, on the caller's stream, with a host
// barrier of all ranks (the worker) between the phases, released to the stream
// by gpu/stream_ops.h's tickets:
//   0. copy the input piece into my scratch                        | barrier
//   1. reduce my shard over every rank's scratch (rank order, so
//      every rank's result has the same bits), into my output;
//      avg's scale; copy that shard back into my scratch           | barrier
//   2. copy every other rank's shard from its scratch to my output | barrier
// The last barrier lets the next piece (or call) overwrite the scratch.
//
// Every rank takes this path or none: the first call decides together
// (each rank's kernels, scratch and peer mappings must all work), and
// GREX_GPU_STAGING=1 keeps the staging path everywhere.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "collectives/jobs.h"
#include "core/config.h"
#include "core/log.h"
#include "gpu/kernels.h"

namespace grex {
namespace {

constexpr size_t kDefaultScratch = size_t{64} << 20;

struct Advert {  // what each rank tells the others at setup
  int32_t ok;
  int32_t pad;
  gpu::CUipcMemHandle handle;
};

}  // namespace

Communicator::Impl::GpuIpc::~GpuIpc() {
  if (api == nullptr || at.empty()) return;
  api->cuCtxSetCurrent(ctx);
  for (size_t r = 0; r < at.size(); ++r) {
    if (at[r] == 0) continue;
    if (static_cast<int>(r) == self) {
      api->cuMemFree(at[r]);
    } else {
      api->cuIpcCloseMemHandle(at[r]);
    }
  }
}

std::optional<Result<WorkPtr>> Communicator::Impl::gpu_ipc_allreduce(const void* sendbuf, void* recvbuf,
                                                                      size_t count, DataType type, ReduceOp op,
                                                                      GpuStream stream) {
  if (size == 1 || count == 0) return std::nullopt;
  if (!ipc) ipc = std::make_unique<GpuIpc>();
  GpuIpc& s = *ipc;
  if (s.state < 0) return std::nullopt;
  if (s.state == 0 && !gpu) {
    if (auto st = gpu::Stager::create()) gpu = std::move(*st);  // else the decision below says why
  }
  if (s.state == 0) {
    // Decided once, by every rank together (a collective, run here on the
    // caller's thread after whatever is queued).
    s.state = -1;
    s.self = rank;
    std::string why;
    bool staging = false;
    (void)config::env_bool("GREX_GPU_STAGING", &staging);
    uint64_t bytes = kDefaultScratch;
    (void)config::env_size("GREX_GPU_IPC_BYTES", &bytes, 1 << 20, uint64_t{1} << 40);
    s.bytes = static_cast<size_t>(bytes) & ~size_t{4095};
    Advert mine{};
    auto api = gpu::cuda();
    if (staging) {
      why = "GREX_GPU_STAGING=1";
    } else if (opts.backend != "shm") {
      why = "backend " + opts.backend + " (GPU to GPU needs every rank on one host: shm)";
    } else if (!api) {
      why = api.error().message();
    } else if (!gpu || !gpu->stream_waits()) {
      why = "the stream cannot wait for the host (GREX_GPU_SYNC=1 or no stream memory operations)";
    } else {
      s.api = *api;
      s.api->cuCtxGetCurrent(&s.ctx);
      auto k = gpu::Kernels::for_current_context();
      gpu::CUdeviceptr p = 0;
      if (!k) {
        why = k.error().message();
      } else if (gpu::CUresult r = s.api->cuMemAlloc(&p, s.bytes); r != 0) {
        why = "cuMemAlloc(" + std::to_string(s.bytes) + "): " + s.api->describe(r);
      } else if (gpu::CUresult r2 = s.api->cuIpcGetMemHandle(&mine.handle, p); r2 != 0) {
        why = "cuIpcGetMemHandle: " + s.api->describe(r2);
        s.api->cuMemFree(p);
      } else {
        s.at.assign(static_cast<size_t>(size), 0);
        s.at[static_cast<size_t>(rank)] = p;
        mine.ok = 1;
      }
    }
    std::vector<Advert> all(static_cast<size_t>(size));
    auto job = allgather_job(*this, &mine, all.data(), sizeof(Advert), DataType::kUint8);
    if (!job) return Result<WorkPtr>(std::move(job).error());
    if (auto r = run(std::move(*job)); !r) return Result<WorkPtr>(std::move(r).error());
    int usable = 1;
    for (int q = 0; q < size; ++q)
      if (all[static_cast<size_t>(q)].ok != 1) {
        usable = 0;
        if (why.empty()) why = "rank " + std::to_string(q) + " cannot take it";
      }
    if (usable) {  // map every peer's scratch
      for (int q = 0; q < size && usable; ++q) {
        if (q == rank) continue;
        gpu::CUdeviceptr peer = 0;
        if (gpu::CUresult r = s.api->cuIpcOpenMemHandle(&peer, all[static_cast<size_t>(q)].handle,
                                                        gpu::kIpcLazyEnablePeerAccess);
            r != 0) {
          usable = 0;
          why = "cuIpcOpenMemHandle(rank " + std::to_string(q) + "): " + s.api->describe(r);
        } else {
          s.at[static_cast<size_t>(q)] = peer;
        }
      }
      int32_t agree = usable;
      auto j2 = allreduce_job(*this, &agree, &agree, 1, DataType::kInt32, ReduceOp::kMin);
      if (!j2) return Result<WorkPtr>(std::move(j2).error());
      if (auto r = run(std::move(*j2)); !r) return Result<WorkPtr>(std::move(r).error());
      if (agree == 1) {
        s.state = 1;
      } else if (why.empty()) {
        why = "another rank could not map a peer's scratch";
      }
    }
    if (s.state != 1) {
      s.why_off = why;
      GREX_INFO("gpu", "GPU allreduce stages through host memory: %s", why.c_str());
      return std::nullopt;
    }
    GREX_INFO("gpu", "GPU allreduce goes GPU to GPU (CUDA IPC, %zu MiB scratch per rank)", s.bytes >> 20);
  }

  // Enqueue every piece's phases on the stream; one job runs their barriers.
  gpu::Stager& st = *gpu;
  auto begun = st.begin(stream.handle, recvbuf);
  if (!begun) return Result<WorkPtr>(std::move(begun).error().rank(rank).context("allreduce"));
  auto call = std::make_shared<gpu::StagedCall>(std::move(*begun));
  auto abandon = [&](Error e) -> std::optional<Result<WorkPtr>> {
    (void)st.end(*call);
    for (size_t i = 0; i < call->tickets.size(); ++i) st.release(*call, i);
    st.retire(std::move(*call));
    return Result<WorkPtr>(std::move(e).rank(rank).context("allreduce"));
  };
  auto kernels = gpu::Kernels::for_current_context();
  if (!kernels) return abandon(std::move(kernels).error());
  const gpu::Kernels& k = **kernels;
  const int kind = static_cast<int>(type);
  const int kop = op == ReduceOp::kAvg ? 0 : static_cast<int>(op);
  const size_t es = dtype_size(type), align = 16 / es;
  const size_t piece_elems = s.bytes / es / align * align;
  const auto n = static_cast<size_t>(size), me = static_cast<size_t>(rank);
  auto* out = static_cast<uint8_t*>(recvbuf);
  const auto* in = static_cast<const uint8_t*>(sendbuf);
  auto step = [&]() -> Result<void> {  // ends a phase: event, ticket, the stream waits for it
    GREX_TRY(st.end_inputs(*call));
    return st.wait_ticket(*call, call->tickets.size() - 1);
  };
  auto enqueue = [&]() -> Result<void> {
    // The previous call may be on another stream: its peers may still read
    // this rank's scratch until its last barrier.
    if (s.last_ticket != 0) GREX_TRY(st.wait_released(*call, s.last_ticket));
    for (size_t first = 0; first < count; first += piece_elems) {
      const size_t cnt = std::min(piece_elems, count - first);
      const size_t per = ((cnt + n - 1) / n + align - 1) / align * align;  // a shard, 16-byte multiple
      auto shard = [&](size_t q) { return std::pair<size_t, size_t>{std::min(q * per, cnt), std::min((q + 1) * per, cnt)}; };
      // 0. my input into my scratch
      GREX_TRY(st.copy(*call, reinterpret_cast<void*>(s.at[me]), in + first * es, cnt * es));
      GREX_TRY(step());
      // 1. my shard, reduced in rank order over every scratch, into my output
      auto [lo, hi] = shard(me);
      if (hi > lo) {
        const size_t off = lo * es, m = hi - lo;
        void* acc = out + (first + lo) * es;
        auto src = [&](size_t q) { return reinterpret_cast<const void*>(s.at[q] + off); };
        GREX_TRY(k.reduce(call->stream, acc, src(0), src(1), m, kind, kop));
        for (size_t q = 2; q < n; ++q) GREX_TRY(k.reduce(call->stream, acc, acc, src(q), m, kind, kop));
        if (op == ReduceOp::kAvg) GREX_TRY(k.scale(call->stream, acc, m, kind, size));
        GREX_TRY(st.copy(*call, reinterpret_cast<void*>(s.at[me] + off), acc, m * es));
      }
      GREX_TRY(step());
      // 2. every other shard from its owner's scratch
      for (size_t q = 0; q < n; ++q) {
        auto [a, b] = shard(q);
        if (q == me || b <= a) continue;
        GREX_TRY(st.copy(*call, out + (first + a) * es, reinterpret_cast<const void*>(s.at[q] + a * es), (b - a) * es));
      }
      GREX_TRY(step());
    }
    return st.end(*call);
  };
  if (auto r = enqueue(); !r) return abandon(std::move(r).error());
  ++gpu_direct_calls;
  s.last_ticket = call->tickets.back();
  GREX_DEBUG("gpu", "allreduce GPU to GPU: %zu elements, tickets %u..%u", count, call->tickets.front(),
             call->tickets.back());
  // Worker: per phase, wait for the stream to reach it, meet every rank, let the stream go on.
  return Result<WorkPtr>(submit([this, call]() -> Result<void> {
    Result<void> r = ok();
    size_t i = 0;
    for (; i < call->tickets.size() && r; ++i) {
      r = gpu->wait_inputs(*call, i);
      if (r) {
        auto b = barrier_job(*this);
        r = b ? (*b)() : Result<void>(std::move(b).error());
      }
      gpu->release(*call, i);
    }
    for (; i < call->tickets.size(); ++i) gpu->release(*call, i);  // after a failure: never leave the stream waiting
    if (r) r = gpu->wait_done(*call);
    gpu->retire(std::move(*call));
    return r;
  }));
}

}  // namespace grex
