// SPDX-License-Identifier: Apache-2.0
// Allreduce of GPU buffers from GPU to GPU, with no host bounce, where every
// rank is on one host (the shm backend): each rank owns a scratch buffer in
// device memory that every other rank maps through CUDA IPC, and grex's
// reduction kernels read the peers' scratch directly (NVLink or PCIe peer
// access between GPUs; the same memory where ranks share one GPU).
//
// Per piece of at most the scratch's size, on the caller's stream, with a
// barrier of all ranks between the phases:
//   0. copy the input piece into my scratch                        | barrier
//   1. reduce my shard over every rank's scratch (rank order, so
//      every rank's result has the same bits), into my output;
//      avg's scale; copy that shard back into my scratch           | barrier
//   2. copy every other rank's shard from its scratch to my output | barrier
// The last barrier lets the next piece (or call) overwrite the scratch.
//
// The barriers meet on the GPUs (gpu/ipc_flags.h): each stream writes the
// barrier's epoch into its rank's slot of a shared page and waits until every
// other slot holds it, so no host thread stands between the phases. The
// worker only watches the call (gpu_ipc_watch): it completes the Work when
// the stream is done, and after the timeout or a peer's death names the
// ranks behind and lets the streams drain. GREX_GPU_IPC_SYNC=host meets on
// the worker instead (a host barrier per phase, released to the stream by
// gpu/stream_ops.h's tickets).
//
// Every rank takes this path or none: the first call decides together
// (each rank's kernels, scratch and peer mappings must all work), and
// GREX_GPU_STAGING=1 keeps the staging path everywhere.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "collectives/gpu_plan.h"
#include "collectives/jobs.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"
#include "gpu/kernels.h"

namespace grex {
namespace {

struct Advert {  // what each rank tells the others at setup
  int32_t ok;
  int32_t all;        // GREX_GPU_IPC_ALL
  uint64_t bytes;     // GREX_GPU_IPC_BYTES: the scratch's size, the same on every rank
  uint64_t min_bytes; // GREX_GPU_IPC_MIN_BYTES
  int32_t sync;       // 1: barriers on the GPUs (the flags page below is rank 0's)
  char flags_name[48];
  gpu::CUipcMemHandle handle;
};

// The flags page's device address for this rank: registered with CUDA (so
// the streams' memory operations reach it), or an error saying why not.
Result<gpu::CUdeviceptr> register_flags(const gpu::CudaApi& api, const gpu::IpcFlags& f) {
  if (gpu::CUresult r = api.cuMemHostRegister(f.base(), f.bytes(), gpu::kHostRegisterPortable | gpu::kHostRegisterDeviceMap);
      r != 0)
    return Error(Errc::kSystem, "cuMemHostRegister(barrier page): " + api.describe(r));
  gpu::CUdeviceptr d = 0;
  if (gpu::CUresult r = api.cuMemHostGetDevicePointer(&d, f.base(), 0); r != 0) {
    api.cuMemHostUnregister(f.base());
    return Error(Errc::kSystem, "cuMemHostGetDevicePointer(barrier page): " + api.describe(r));
  }
  return d;
}

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
  if (flags_dev != 0) api->cuMemHostUnregister(flags.base());
  flags_dev = 0;
  flags = gpu::IpcFlags();
  stream_sync = false;
}

Communicator::Impl::GpuIpc::~GpuIpc() { release(); }

bool Communicator::Impl::ipc_wanted(size_t bytes, bool all) const {
  return bytes > 0 && bytes >= gpu_env.ipc_min_bytes && (all ? gpu_env.ipc_all : true);
}

uint8_t* Communicator::Impl::scratch(size_t r) const { return reinterpret_cast<uint8_t*>(ipc->at[r]); }

Result<void> Communicator::Impl::IpcQueue::copy(void* dst, const void* src, size_t bytes) {
  return st.copy(call, dst, src, bytes);
}

Result<void> Communicator::Impl::IpcQueue::barrier() {
  if (!ipc.stream_sync) {
    GREX_TRY(st.end_inputs(call));
    return st.wait_ticket(call, call.tickets.size() - 1);
  }
  // This rank's slot := the epoch (after everything before it on the stream,
  // fenced), then wait until every other slot reached it.
  const uint32_t e = ++ipc.epoch;
  call.enqueued = true;
  if (gpu::CUresult r = ipc.api->cuStreamWriteValue32(call.stream, ipc.slot_dev(ipc.self), e, 0); r != 0)
    return Error(Errc::kSystem, "cuStreamWriteValue32(barrier): " + ipc.api->describe(r));
  for (int p = 0; p < ipc.flags.ranks(); ++p) {
    if (p == ipc.self) continue;
    if (gpu::CUresult r = ipc.api->cuStreamWaitValue32(call.stream, ipc.slot_dev(p), e, gpu::kStreamWaitValueGeq); r != 0)
      return Error(Errc::kSystem, "cuStreamWaitValue32(barrier): " + ipc.api->describe(r));
  }
  return ok();
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
    mine.min_bytes = gpu_env.ipc_min_bytes;
    // Barriers on the GPUs: rank 0 makes the page the others map.
    std::string sync_why = gpu_env.ipc_host_sync ? "GREX_GPU_IPC_SYNC=host" : "";
    if (mine.ok == 1 && !gpu_env.ipc_host_sync) {
      if (s.api->cuStreamWriteValue32 == nullptr) {
        sync_why = "the CUDA driver has no cuStreamWriteValue32_v2";
      } else if (rank == 0) {
        if (auto f = gpu::IpcFlags::create(size)) {
          s.flags = std::move(*f);
          std::snprintf(mine.flags_name, sizeof mine.flags_name, "%s", s.flags.name().c_str());
          mine.sync = 1;
        } else {
          sync_why = f.error().message();
        }
      } else {
        mine.sync = 1;
      }
    }
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
      } else if (a.bytes != mine.bytes || a.all != mine.all || a.min_bytes != mine.min_bytes) {
        usable = 0;  // every rank must choose and cut its calls alike
        if (why.empty())
          why = "GREX_GPU_IPC_BYTES, _ALL or _MIN_BYTES differ between rank " + std::to_string(q) + " and this one";
      }
    }
    bool want_sync = true;  // decided alike from the same adverts
    for (int q = 0; q < size && want_sync; ++q) {
      if (all[static_cast<size_t>(q)].sync != 1) {
        want_sync = false;
        if (sync_why.empty()) sync_why = "rank " + std::to_string(q) + " meets on the host";
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
      int32_t flags_ok = 0;
      if (usable && want_sync) {
        Result<void> f = ok();
        if (rank != 0) {
          std::string name(all[0].flags_name, strnlen(all[0].flags_name, sizeof all[0].flags_name));
          auto opened = gpu::IpcFlags::open(name, size);
          if (opened) s.flags = std::move(*opened);
          else f = std::move(opened).error();
        }
        if (f) {
          if (auto d = register_flags(*s.api, s.flags)) s.flags_dev = *d;
          else f = std::move(d).error();
        }
        if (f) flags_ok = 1;
        else sync_why = f.error().message();
      }
      int32_t agree[2] = {usable, flags_ok};
      auto j2 = allreduce_job(*this, agree, agree, 2, DataType::kInt32, ReduceOp::kMin);
      if (!j2) return std::move(j2).error();
      if (auto r = run(std::move(*j2)); !r) return std::move(r).error();
      s.flags.unlink();  // every rank has opened it, or given up
      if (agree[0] == 1) {
        s.state = 1;
        s.stream_sync = agree[1] == 1;
        if (!s.stream_sync) {
          if (s.flags_dev != 0) s.api->cuMemHostUnregister(s.flags.base());
          s.flags_dev = 0;
          s.flags = gpu::IpcFlags();
          if (sync_why.empty()) sync_why = "another rank could not map the barrier page";
        }
      } else if (why.empty()) {
        why = "another rank could not map a peer's scratch";
      }
    }
    if (s.state != 1) {
      s.release();  // give back what was taken
      GREX_INFO("gpu", "GPU collectives stage through host memory: %s", why.c_str());
      return false;
    }
    GREX_INFO("gpu", "GPU allreduce goes GPU to GPU (CUDA IPC, %zu MiB scratch per rank)%s; barriers meet %s%s%s",
              s.bytes >> 20, gpu_env.ipc_all ? ", so do the other collectives" : "",
              s.stream_sync ? "on the GPUs" : "on the host", s.stream_sync ? "" : ": ", sync_why.c_str());
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
  IpcQueue q{st, *call, kernels ? *kernels : nullptr, s};
  if (s.stream_sync) {
    // The previous call may be on another stream: every rank (this one too)
    // must have passed its last barrier before this call writes a scratch.
    const uint32_t first = s.epoch + 1;
    for (int p = 0; r && s.has_last && p < size; ++p)
      if (gpu::CUresult e = s.api->cuStreamWaitValue32(call->stream, s.slot_dev(p), s.last_epoch, gpu::kStreamWaitValueGeq);
          e != 0)
        r = Error(Errc::kSystem, "cuStreamWaitValue32(previous call): " + s.api->describe(e));
    if (r) r = plan(q);
    if (r) r = st.end(*call);
    s.last_epoch = s.epoch;  // epochs enqueued are spent, whatever happens to this call
    s.has_last = true;
    std::optional<Error> failed;
    if (!r) {
      failed = named(std::move(r).error());
      (void)st.end(*call);
    } else {
      ++gpu_direct_calls;
    }
    GREX_DEBUG("gpu", "%s GPU to GPU: barriers %u..%u on the GPUs", what, first, s.epoch);
    WorkPtr w = submit(gpu_ipc_watch(call, first, s.epoch, failed, what));
    if (failed) return *failed;
    return w;
  }
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

detail::JobFn Communicator::Impl::gpu_ipc_watch(std::shared_ptr<gpu::StagedCall> call, uint32_t first, uint32_t last,
                                                std::optional<Error> failed, const char* what) {
  return [this, call, first, last, failed = std::move(failed), what]() mutable -> Result<void> {
    GpuIpc& s = *ipc;
    const gpu::CudaApi& api = *s.api;
    api.cuCtxSetCurrent(call->ctx);
    Result<void> r = ok();
    if (failed) {
      r = broken ? Result<void>(*broken) : finish(Result<void>(std::move(*failed)), what);
    } else if (broken) {
      r = *broken;
    }
    std::vector<uint32_t> seen = s.flags.snapshot();
    uint64_t still_since = now_ns();
    const uint64_t timeout_ns = opts.timeout_ms < 0 ? UINT64_MAX : static_cast<uint64_t>(opts.timeout_ms) * 1'000'000;
    // Another rank failed this call and released the streams: this rank's
    // stream may complete, but on data that was never exchanged.
    auto peer_broke = [&]() -> Result<void> {
      const int b = s.flags.broken_by();
      if (b < 0 || b == rank) return ok();
      if (auto e = engine->check_peer(b); !e) return e;  // its own word, where it came already
      return Error(Errc::kPeerFailed, std::string("GPU-to-GPU ") + what + ": rank " + std::to_string(b) +
                                          " failed this call (its error says why)")
          .rank(rank)
          .peer(b);
    };
    for (uint64_t spins = 0;; ++spins) {
      gpu::CUresult q = api.cuEventQuery(call->done);
      if (q == 0) break;
      if (q != gpu::kErrorNotReady && r)
        r = finish(Error(Errc::kSystem, std::string("GPU-to-GPU ") + what + ": " + api.describe(q)).rank(rank), what);
      if (!r) {
        // Broken: let every stream (this rank's and the peers') run past
        // every barrier it may wait for; their results do not count.
        s.flags.mark_broken(rank);
        s.flags.store_all(last + (1u << 30));
      } else if ((spins & 63) == 63) {
        if (auto e = peer_broke(); !e) {
          r = finish(std::move(e), what);
          continue;
        }
        std::vector<uint32_t> now = s.flags.snapshot();
        const uint64_t t = now_ns();
        if (now != seen) seen = std::move(now), still_since = t;
        const uint32_t mine = seen[static_cast<size_t>(rank)];
        // The barrier this rank's stream waits at (or none yet: the stream
        // has not reached the call, and earlier work is not grex's to time).
        const bool inside = gpu::IpcFlags::reached(mine, first) && !gpu::IpcFlags::reached(mine, last + 1);
        std::vector<int> behind = inside ? s.flags.behind(mine) : std::vector<int>{};
        if (auto e = engine->progress(); !e) r = finish(std::move(e), what);
        for (size_t i = 0; r && i < behind.size(); ++i)
          if (auto e = engine->check_peer(behind[i]); !e) r = finish(std::move(e), what);
        if (r && inside && !behind.empty() && t - still_since > timeout_ns) {
          std::string who;
          for (int b : behind) {
            const uint32_t at = seen[static_cast<size_t>(b)];
            who += (who.empty() ? "rank " : ", rank ") + std::to_string(b) +
                   (gpu::IpcFlags::reached(at, first) ? " (at barrier " + std::to_string(at - first + 1) + ")"
                                                      : " (not yet in this call)");
          }
          r = finish(Error(Errc::kTimeout, std::string("GPU-to-GPU ") + what + ": no rank moved for " +
                                               std::to_string(opts.timeout_ms) + " ms; this rank waits at barrier " +
                                               std::to_string(mine - first + 1) + " of " +
                                               std::to_string(last - first + 1) + " for " + who)
                         .rank(rank)
                         .peer(behind.front())
                         .hint("the ranks named are stuck, slower, or called another collective; raise "
                               "GREX_TIMEOUT_MS if they are just slow"),
                     what);
        }
      }
      // Spin first (most calls end within a millisecond), then nap.
      if (spins > 16384) std::this_thread::sleep_for(std::chrono::microseconds(spins > 262144 ? 200 : 20));
    }
    if (r) {
      if (auto e = peer_broke(); !e) r = finish(std::move(e), what);
    }
    // After a failure, once more now that this stream wrote its last: a
    // stream that failed halfway left fewer barriers than its peers wait for.
    if (!r) s.flags.store_all(last + (1u << 30));
    gpu->retire(std::move(*call));
    return r;
  };
}

// ---- The plans. In each: input pieces into this rank's scratch, a barrier,
// reads of the peers' scratch (copies, or reductions in rank order), a
// barrier; pieces as large as the scratch allows. ----

std::optional<Result<WorkPtr>> Communicator::Impl::gpu_ipc_allreduce(const void* sendbuf, void* recvbuf,
                                                                      size_t count, DataType type, ReduceOp op,
                                                                      GpuStream stream) {
  if (auto e = load_gpu_env(); !e) return Result<WorkPtr>(std::move(e).error().rank(rank));
  if (!ipc_wanted(count * dtype_size(type), false)) return std::nullopt;
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
  const bool per_rank = coll != detail::Coll::kBroadcast && coll != detail::Coll::kReduce;
  if (!ipc_wanted(count * dtype_size(type) * (per_rank ? static_cast<size_t>(size) : 1), true)) return std::nullopt;
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
