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

#include "collectives/gpu_plan.h"
#include "collectives/jobs.h"
#include "core/config.h"
#include "core/log.h"
#include "gpu/kernels.h"

namespace grex {
namespace {

struct Advert {  // what each rank tells the others at setup
  int32_t ok;
  int32_t all;      // GREX_GPU_IPC_ALL
  uint64_t bytes;   // GREX_GPU_IPC_BYTES: the scratch's size, the same on every rank
  gpu::CUipcMemHandle handle;
};

}  // namespace

void Communicator::Impl::GpuIpc::release() noexcept {
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
  at.clear();
}

Communicator::Impl::GpuIpc::~GpuIpc() { release(); }

bool Communicator::Impl::ipc_all() const { return gpu_env.ipc_all; }

uint8_t* Communicator::Impl::scratch(size_t r) const { return reinterpret_cast<uint8_t*>(ipc->at[r]); }

Result<void> Communicator::Impl::IpcQueue::copy(void* dst, const void* src, size_t bytes) {
  return st.copy(call, dst, src, bytes);
}

Result<void> Communicator::Impl::IpcQueue::barrier() {
  GREX_TRY(st.end_inputs(call));
  return st.wait_ticket(call, call.tickets.size() - 1);
}

// acc = op over every rank r of scratch(r)[off, off + m elements), in rank
// order (acc may not be any rank's scratch range that is read); avg scaled.
Result<void> Communicator::Impl::IpcQueue::reduce_all(void* acc, size_t off, size_t m, DataType type, ReduceOp op,
                                                      const Impl& c) {
  if (m == 0) return ok();
  const int kind = static_cast<int>(type);
  const int kop = op == ReduceOp::kAvg ? 0 : static_cast<int>(op);
  auto src = [&](size_t r) { return static_cast<const void*>(c.scratch(r) + off); };
  if (c.size == 1) return copy(acc, src(0), m * dtype_size(type));
  GREX_TRY(kernels->reduce(call.stream, acc, src(0), src(1), m, kind, kop));
  for (size_t r = 2; r < static_cast<size_t>(c.size); ++r) GREX_TRY(kernels->reduce(call.stream, acc, acc, src(r), m, kind, kop));
  if (op == ReduceOp::kAvg) GREX_TRY(kernels->scale(call.stream, acc, m, kind, c.size));
  return ok();
}

Result<bool> Communicator::Impl::gpu_ipc_ready(const void* any_buffer) {
  if (size == 1) return false;
  GREX_TRY(load_gpu_env());
  if (!ipc) ipc = std::make_unique<GpuIpc>();
  GpuIpc& s = *ipc;
  if (s.state != 0) return s.state > 0;
  if (s.state == 0 && !gpu) {
    if (auto st = gpu::Stager::create(gpu_env.sync)) gpu = std::move(*st);  // else the decision below says why
  }
  if (s.state == 0) {
    // Decided once, by every rank together (a collective, run here on the
    // caller's thread after whatever is queued).
    s.state = -1;
    s.self = rank;
    std::string why;
    const bool staging = gpu_env.staging;
    s.bytes = static_cast<size_t>(gpu_env.ipc_bytes) & ~size_t{4095};
    Advert mine{};
    auto api = gpu::cuda();
    if (staging) {
      why = "GREX_GPU_STAGING=1";
    } else if (device->capabilities().driver != "shm") {
      why = "backend " + device->capabilities().driver + " (GPU to GPU needs every rank on one host: shm)";
    } else if (!api) {
      why = api.error().message();
    } else if (!gpu || !gpu->stream_waits()) {
      why = "the stream cannot wait for the host (GREX_GPU_SYNC=1 or no stream memory operations)";
    } else {
      s.api = *api;
      // The buffer's context (its device), where later calls run too.
      gpu::CUcontext bctx = nullptr;
      if (any_buffer != nullptr &&
          s.api->cuPointerGetAttribute(&bctx, gpu::kPointerAttrContext, reinterpret_cast<gpu::CUdeviceptr>(any_buffer)) == 0 &&
          bctx != nullptr) {
        s.ctx = bctx;
        s.api->cuCtxSetCurrent(bctx);
      } else {
        s.api->cuCtxGetCurrent(&s.ctx);
      }
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
    mine.all = gpu_env.ipc_all ? 1 : 0;
    mine.bytes = s.bytes;
    std::vector<Advert> all(static_cast<size_t>(size));
    auto job = allgather_job(*this, &mine, all.data(), sizeof(Advert), DataType::kUint8);
    if (!job) return std::move(job).error();
    if (auto r = run(std::move(*job)); !r) return std::move(r).error();
    int usable = 1;
    for (int q = 0; q < size; ++q) {
      const Advert& a = all[static_cast<size_t>(q)];
      if (a.ok != 1) {
        usable = 0;
        if (why.empty()) why = "rank " + std::to_string(q) + " cannot take it";
      } else if (a.bytes != mine.bytes || a.all != mine.all) {  // every rank must cut its pieces alike
        usable = 0;
        if (why.empty())
          why = "GREX_GPU_IPC_BYTES or GREX_GPU_IPC_ALL differ between rank " + std::to_string(q) + " and this one";
      }
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
      if (!j2) return std::move(j2).error();
      if (auto r = run(std::move(*j2)); !r) return std::move(r).error();
      if (agree == 1) {
        s.state = 1;
      } else if (why.empty()) {
        why = "another rank could not map a peer's scratch";
      }
    }
    if (s.state != 1) {
      s.release();  // give back what was taken
      GREX_INFO("gpu", "GPU collectives stage through host memory: %s", why.c_str());
      return false;
    }
    GREX_INFO("gpu", "GPU allreduce goes GPU to GPU (CUDA IPC, %zu MiB scratch per rank)%s", s.bytes >> 20,
              ipc_all() ? "; so do the other collectives (GREX_GPU_IPC_ALL=1)" : "");
  }

  return true;
}

// Enqueues `plan` (copies, reductions and barriers on the caller's stream)
// and submits the one job that runs its barriers, in order, on the worker.
Result<WorkPtr> Communicator::Impl::gpu_ipc_run(const char* what, GpuStream stream, const void* any_buffer,
                                                const std::function<Result<void>(IpcQueue&)>& plan) {
  GpuIpc& s = *ipc;
  gpu::Stager& st = *gpu;
  auto named = [&](Error e) { return std::move(e).rank(rank).context(what); };
  auto begun = st.begin(stream.handle, any_buffer);
  // Every rank takes this path for this call, so a rank that cannot must
  // break the communicator (the peers are told) rather than return alone.
  if (!begun) return abandon_gpu_call(nullptr, named(std::move(begun).error()), what);
  auto call = std::make_shared<gpu::StagedCall>(std::move(*begun));
  Result<void> r = ok();
  if (call->ctx != s.ctx)
    r = Error(Errc::kInvalidArgument, "GPU buffers in another CUDA context than the first GPU collective's")
            .hint("the GPU-to-GPU path maps one device's scratch; keep a communicator on one GPU, or set "
                  "GREX_GPU_STAGING=1");
  auto kernels = gpu::Kernels::for_current_context();
  if (r && !kernels) r = std::move(kernels).error();
  IpcQueue q{st, *call, kernels ? *kernels : nullptr};
  // The previous call may be on another stream: its peers may still read
  // this rank's scratch until its last barrier.
  if (r && s.has_last) r = st.wait_released(*call, s.last_ticket);
  if (r) r = plan(q);
  if (r) r = st.end(*call);
  if (!call->tickets.empty()) {  // the next call waits for these, whatever happens to this one
    s.last_ticket = call->tickets.back();
    s.has_last = true;
  }
  if (!r) return abandon_gpu_call(call, named(std::move(r).error()), what);
  ++gpu_direct_calls;
  GREX_DEBUG("gpu", "%s GPU to GPU: %zu barriers", what, call->tickets.size());
  // Worker: per barrier, wait for the stream to reach it, meet every rank, let the stream go on.
  return submit([this, call]() -> Result<void> {
    Result<void> r = ok();
    size_t i = 0;
    for (; i < call->tickets.size() && r; ++i) {
      r = gpu->wait_inputs(*call, i);
      if (!r) r = finish(std::move(r), "GPU-to-GPU collective");  // break it: the peers are told
      if (r) {
        auto b = barrier_job(*this);
        r = b ? (*b)() : Result<void>(std::move(b).error());
      }
      gpu->release(*call, i);
    }
    for (; i < call->tickets.size(); ++i) gpu->release(*call, i);  // after a failure: never leave the stream waiting
    if (r) {
      r = gpu->wait_done(*call);
      if (!r) r = finish(std::move(r), "GPU-to-GPU collective");
    }
    gpu->retire(std::move(*call));
    return r;
  });
}

// ---- The plans. In each: input pieces into this rank's scratch, a barrier,
// reads of the peers' scratch (copies, or reductions in rank order), a
// barrier; pieces as large as the scratch allows. ----

std::optional<Result<WorkPtr>> Communicator::Impl::gpu_ipc_allreduce(const void* sendbuf, void* recvbuf,
                                                                      size_t count, DataType type, ReduceOp op,
                                                                      GpuStream stream) {
  if (count == 0) return std::nullopt;
  auto ready = gpu_ipc_ready(recvbuf);
  if (!ready) return Result<WorkPtr>(std::move(ready).error());
  if (!*ready) return std::nullopt;
  const GpuIpc& s = *ipc;
  const size_t es = dtype_size(type);
  const size_t piece_elems = detail::ipc_piece_elems(s.bytes, es);
  const auto n = static_cast<size_t>(size), me = static_cast<size_t>(rank);
  auto* out = static_cast<uint8_t*>(recvbuf);
  const auto* in = static_cast<const uint8_t*>(sendbuf);
  return gpu_ipc_run("allreduce", stream, recvbuf, [&](IpcQueue& q) -> Result<void> {
    for (size_t first = 0; first < count; first += piece_elems) {
      const size_t cnt = std::min(piece_elems, count - first);
      auto shard = [&](size_t r) { return detail::ipc_shard(cnt, n, es, r); };
      // 0. my input into my scratch
      GREX_TRY(q.copy(scratch(me), in + first * es, cnt * es));
      GREX_TRY(q.barrier());
      // 1. my shard, reduced in rank order over every scratch, into my output,
      //    and back into my scratch for the others
      auto [lo, hi] = shard(me);
      if (hi > lo) {
        void* acc = out + (first + lo) * es;
        GREX_TRY(q.reduce_all(acc, lo * es, hi - lo, type, op, *this));
        GREX_TRY(q.copy(scratch(me) + lo * es, acc, (hi - lo) * es));
      }
      GREX_TRY(q.barrier());
      // 2. every other shard from its owner's scratch
      for (size_t r = 0; r < n; ++r) {
        auto [a, b] = shard(r);
        if (r != me && b > a) GREX_TRY(q.copy(out + (first + a) * es, scratch(r) + a * es, (b - a) * es));
      }
      GREX_TRY(q.barrier());
    }
    return ok();
  });
}

std::optional<Result<WorkPtr>> Communicator::Impl::gpu_ipc_other(detail::Coll coll, const void* sendbuf,
                                                                  void* recvbuf, size_t count, DataType type,
                                                                  ReduceOp op, int root, GpuStream stream) {
  if (auto e = load_gpu_env(); !e) return Result<WorkPtr>(std::move(e).error().rank(rank));
  if (count == 0 || !ipc_all()) return std::nullopt;
  auto ready = gpu_ipc_ready(recvbuf != nullptr ? recvbuf : sendbuf);
  if (!ready) return Result<WorkPtr>(std::move(ready).error());
  if (!*ready) return std::nullopt;
  const GpuIpc& s = *ipc;
  const size_t es = dtype_size(type);
  const auto n = static_cast<size_t>(size), me = static_cast<size_t>(rank);
  auto* out = static_cast<uint8_t*>(recvbuf);
  const auto* in = static_cast<const uint8_t*>(sendbuf);
  const size_t block = count * es;  // per rank (reduce_scatter, allgather, alltoall) or the vector
  using detail::Coll;
  switch (coll) {
    case Coll::kBroadcast:  // the root's pieces through its scratch
      return gpu_ipc_run("broadcast", stream, recvbuf, [&](IpcQueue& q) -> Result<void> {
        const size_t piece = s.bytes;
        for (size_t o = 0; o < block; o += piece) {
          const size_t len = std::min(piece, block - o);
          if (rank == root) GREX_TRY(q.copy(scratch(me), out + o, len));
          GREX_TRY(q.barrier());
          if (rank != root) GREX_TRY(q.copy(out + o, scratch(static_cast<size_t>(root)), len));
          GREX_TRY(q.barrier());
        }
        return ok();
      });
    case Coll::kReduce:  // the root reduces every scratch in rank order
      return gpu_ipc_run("reduce", stream, sendbuf, [&](IpcQueue& q) -> Result<void> {
        const size_t piece_elems = detail::ipc_piece_elems(s.bytes, es);
        for (size_t first = 0; first < count; first += piece_elems) {
          const size_t cnt = std::min(piece_elems, count - first);
          GREX_TRY(q.copy(scratch(me), in + first * es, cnt * es));
          GREX_TRY(q.barrier());
          if (rank == root) GREX_TRY(q.reduce_all(out + first * es, 0, cnt, type, op, *this));
          GREX_TRY(q.barrier());
        }
        return ok();
      });
    case Coll::kAllgather:  // my block's pieces through my scratch; every block read from its owner's
      return gpu_ipc_run("allgather", stream, recvbuf, [&](IpcQueue& q) -> Result<void> {
        const size_t piece = s.bytes;
        for (size_t o = 0; o < block; o += piece) {
          const size_t len = std::min(piece, block - o);
          GREX_TRY(q.copy(scratch(me), in + o, len));
          GREX_TRY(q.barrier());
          for (size_t r = 0; r < n; ++r) GREX_TRY(q.copy(out + r * block + o, scratch(r), len));
          GREX_TRY(q.barrier());
        }
        return ok();
      });
    case Coll::kReduceScatter:  // piece [o, o+len) of every rank's block side by side in the scratch
      return gpu_ipc_run("reduce_scatter", stream, recvbuf, [&](IpcQueue& q) -> Result<void> {
        const size_t piece_elems = detail::ipc_block_piece_elems(s.bytes, n, es);
        for (size_t first = 0; first < count; first += piece_elems) {
          const size_t cnt = std::min(piece_elems, count - first), len = cnt * es, stride = piece_elems * es;
          for (size_t r = 0; r < n; ++r) GREX_TRY(q.copy(scratch(me) + r * stride, in + r * block + first * es, len));
          GREX_TRY(q.barrier());
          GREX_TRY(q.reduce_all(out + first * es, me * stride, cnt, type, op, *this));
          GREX_TRY(q.barrier());
        }
        return ok();
      });
    case Coll::kAlltoall:  // every rank's blocks for all ranks side by side; each reads its own
      return gpu_ipc_run("alltoall", stream, recvbuf, [&](IpcQueue& q) -> Result<void> {
        const size_t piece = detail::ipc_block_piece_bytes(s.bytes, n);
        for (size_t o = 0; o < block; o += piece) {
          const size_t len = std::min(piece, block - o);
          for (size_t r = 0; r < n; ++r) GREX_TRY(q.copy(scratch(me) + r * piece, in + r * block + o, len));
          GREX_TRY(q.barrier());
          for (size_t r = 0; r < n; ++r) GREX_TRY(q.copy(out + r * block + o, scratch(r) + me * piece, len));
          GREX_TRY(q.barrier());
        }
        return ok();
      });
    default: break;
  }
  return std::nullopt;
}

}  // namespace grex
