// SPDX-License-Identifier: Apache-2.0
// Communicator internals: what one communicator holds, by concern. The
// algorithms do not see it: they run on a Context and a Group (algorithm.h).
//   - bootstrap, device, endpoints, engine: the connection to every rank
//   - ctx: buffers and registration cache, options, the call being run
//   - queue: the async worker (work_queue.h)
//   - select: algorithm choice (selector.h)
//   - area: the flat and staged algorithms' shared slots (shared_area.h)
//   - call bookkeeping: sequence numbers, tags, the broken state, diagnosis
#pragma once

#include <grex/communicator.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/buffers.h"
#include "collectives/context.h"
#include "collectives/engine.h"
#include "collectives/group.h"
#include "collectives/hierarchy.h"
#include "collectives/notices.h"
#include "collectives/recorder.h"
#include "collectives/selector.h"
#include "collectives/status.h"
#include "collectives/shared_area.h"
#include "collectives/work_queue.h"
#include "core/counters.h"
#include "gpu/ipc_flags.h"
#include "gpu/kernels.h"
#include "gpu/stream_ops.h"

namespace grex {

struct Communicator::Impl {
  // Declared in the order they are built; ~Communicator takes them down in
  // the order the flows need (endpoints before the memory they may touch).
  std::shared_ptr<Bootstrap> bootstrap;
  std::unique_ptr<Device> device;
  std::vector<std::unique_ptr<Endpoint>> endpoints;  // [rank]; null for self
  std::unique_ptr<detail::Engine> engine;
  std::unique_ptr<detail::Notices> notices;  // CommOptions::any_source
  std::unique_ptr<detail::Recorder> recorder;  // the flight recorder (CommOptions::trace_entries)
  detail::StatusService::Membership status;  // answers status requests from the recorder (status.h); after it: leaves first
  std::unique_ptr<detail::Buffers> bufs;
  std::unique_ptr<detail::SharedArea> area;
  std::optional<detail::Group> world;  // every rank, in rank order
  detail::Context ctx;
  detail::Selector select;
  /// The levels where ranks span hosts and some host has several (ctx.hier points here).
  std::unique_ptr<detail::Hierarchy> hier;
  std::string topology;  // Communicator::topology()
  const detail::Algorithm* barrier_algo = nullptr;  // the first usable barrier, chosen at creation
  /// GPU to GPU on one host (gpu_ipc.cc): each rank's scratch in device
  /// memory, mapped by every other rank through CUDA IPC.
  struct GpuIpc {
    int state = 0;  // 0: not tried yet; 1: on; -1: off (staging)
    const gpu::CudaApi* api = nullptr;
    gpu::CUcontext ctx = nullptr;
    int self = 0;                       // this rank: at[self] is its own allocation
    size_t bytes = 0;                   // of each rank's scratch
    uint32_t last_ticket = 0;           // the previous call's last: scratch free again once released
    bool has_last = false;
    std::vector<gpu::CUdeviceptr> at;   // [rank]: its scratch as this rank maps it
    // Barriers on the GPUs (the default): the host's barrier page, registered
    // with CUDA; each barrier's epoch is one more than the last enqueued.
    bool stream_sync = false;
    gpu::IpcFlags flags;
    gpu::CUdeviceptr flags_dev = 0;     // the page as the GPU sees it (0: not registered)
    uint32_t epoch = 0;                 // the last barrier enqueued (caller's thread)
    uint32_t last_epoch = 0;            // the previous call's last barrier
    gpu::CUdeviceptr slot_dev(int r) const noexcept { return flags_dev + gpu::IpcFlags::offset(r); }
    void release() noexcept;  // frees this rank's scratch, unmaps the peers' and the barrier page
    ~GpuIpc();
  };
  /// The GREX_GPU_* variables, read at the first stream-ordered call
  /// (load_gpu_env: a malformed value is an error naming it).
  struct GpuEnv {
    bool loaded = false;
    bool sync = false;       // GREX_GPU_SYNC: the caller waits
    bool staging = false;    // GREX_GPU_STAGING: never GPU to GPU
    bool ipc_all = true;     // GREX_GPU_IPC_ALL=0: only allreduce GPU to GPU
    bool ipc_host_sync = false;       // GREX_GPU_IPC_SYNC=host: barriers on the worker, not the GPUs
    uint64_t chunk = 4u << 20;        // GREX_GPU_CHUNK_BYTES
    uint64_t ipc_bytes = 64u << 20;   // GREX_GPU_IPC_BYTES
    uint64_t ipc_min_bytes = 0;       // GREX_GPU_IPC_MIN_BYTES: smaller calls stage
  } gpu_env;
  Result<void> load_gpu_env();
  uint64_t gpu_direct_calls = 0;     // counted on the caller's thread (CommStats)
  uint64_t gpu_staged_calls = 0;
  std::unique_ptr<GpuIpc> ipc;       // declared before gpu: freed after the streams drained
  std::unique_ptr<gpu::Stager> gpu;  // GPU buffers' staging (made on first use); outlives the queue
  detail::WorkQueue queue;
  CommOptions opts;
  CommStats stats;           // filled by Communicator::stats() on the caller's thread
  Counter collectives_done;  // finish() counts here (the worker's thread, maybe)
  int rank = 0;
  int size = 1;
  uint32_t seq = 0;               // collective sequence number, for tags
  uint32_t sig = 0;               // the running call's signature (begin())
  std::optional<Error> broken;    // set by the first failed collective
  /// Compressed allreduce (the worker's): residuals per feedback key, and
  /// the compressed copy of the vector in flight.
  std::unordered_map<const void*, std::vector<float>> feedback;
  std::vector<uint8_t> compress_wire;
  /// Deadline allreduce (deadline_allreduce.cc, the worker's): calls so far,
  /// results on their way to late ranks (a copy each, a spare once its sends
  /// finished; ~Communicator frees the rest after the endpoints), and the
  /// vectors late ranks carry into their next call, per key.
  uint64_t deadline_calls = 0;
  struct Delivery {
    MemoryRegion* copy = nullptr;
    std::vector<detail::OpId> sends;
  };
  std::vector<Delivery> deliveries;
  /// Copies whose sends finished, kept for the next late ranks' results (at
  /// most kSpareCopies): a fresh one of a training step's gradients cost a
  /// mapping, its page faults and the kernel's zeroing every step.
  std::vector<MemoryRegion*> spare_copies;
  static constexpr size_t kSpareCopies = 2;
  std::unordered_map<const void*, std::vector<uint8_t>> carried;

  /// One piece of a stream-ordered call (gpu_call): copies between pinned
  /// memory (offset) and the caller's buffers, and the host job between them.
  struct GpuCopy {
    size_t off;
    const void* user;
    size_t bytes;
  };
  struct GpuPiece {
    std::vector<GpuCopy> ins, outs;
    detail::JobFn job;
  };
  /// Plans a call's pieces on `pinned` (host memory of the size asked for).
  using GpuPlan = std::function<Result<std::vector<GpuPiece>>(uint8_t* pinned)>;
  /// Enqueues a stream-ordered call (gpu_calls.cc): `pinned_bytes` of pinned
  /// staging, the pieces' copies on `stream`, their jobs on the worker. With
  /// no staging (host buffers) the plan gets nullptr and its pieces copy
  /// nothing: the stream still orders them. A copy to or from pageable host
  /// memory would block the caller until the stream reached it, before the
  /// worker had the job: host buffers never take copies.
  Result<WorkPtr> gpu_call(const char* what, GpuStream stream, const void* any_buffer, size_t pinned_bytes,
                           const GpuPlan& plan);
  /// GPU to GPU on one host (gpu_ipc.cc). gpu_ipc_ready(): whether every
  /// rank can take it (decided together at the first call, a collective).
  Result<bool> gpu_ipc_ready(const void* any_buffer);
  /// The GPU-to-GPU allreduce; nullopt where the staging path runs instead.
  std::optional<Result<WorkPtr>> gpu_ipc_allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType type,
                                                   ReduceOp op, GpuStream stream);
  /// The other collectives GPU to GPU (unless GREX_GPU_IPC_ALL=0); nullopt
  /// where they stage. count: per rank for reduce_scatter, allgather and
  /// alltoall; the vector's for the others.
  std::optional<Result<WorkPtr>> gpu_ipc_other(detail::Coll coll, const void* sendbuf, void* recvbuf, size_t count,
                                               DataType type, ReduceOp op, int root, GpuStream stream);
  /// What a plan queues on the caller's stream.
  struct IpcQueue {
    gpu::Stager& st;
    gpu::StagedCall& call;
    const gpu::Kernels* kernels;
    GpuIpc& ipc;
    Result<void> copy(void* dst, const void* src, size_t bytes);
    /// Ends a phase: the stream waits until every rank reached it.
    Result<void> barrier();
    Result<void> reduce_all(void* acc, size_t off, size_t m, DataType type, ReduceOp op, const Impl& c);
  };
  Result<WorkPtr> gpu_ipc_run(const char* what, GpuStream stream, const void* any_buffer,
                              const std::function<Result<void>(IpcQueue&)>& plan);
  /// The job that completes a call whose barriers meet on the GPUs: waits
  /// for its `done`, names the ranks behind after the timeout or a peer's
  /// death, and after any failure lets every stream drain.
  detail::JobFn gpu_ipc_watch(std::shared_ptr<gpu::StagedCall> call, uint32_t first, uint32_t last,
                              std::optional<Error> failed, const char* what);
  /// Whether a call of `bytes` (its largest buffer) goes GPU to GPU at all.
  bool ipc_wanted(size_t bytes, bool all) const;
  uint8_t* scratch(size_t r) const;     // rank r's scratch, as this rank maps it
  /// Ends a stream-ordered call that failed after it put work on the stream
  /// (gpu_calls.cc): returns `e`; the worker marks the communicator broken.
  Result<WorkPtr> abandon_gpu_call(std::shared_ptr<gpu::StagedCall> call, Error e, const char* what);
  /// Piece size for the pipelined calls [GREX_GPU_CHUNK_BYTES].
  size_t gpu_chunk_bytes(size_t bytes) const noexcept;

  Result<void> run(detail::JobFn fn) { return queue.run(std::move(fn)); }
  WorkPtr submit(detail::JobFn fn) { return queue.submit(std::move(fn)); }

  /// Measures alpha, beta (ping-pong with a neighbour) and gamma (a local
  /// reduction); every rank ends with the slowest pair's values. Across
  /// hosts, alpha and beta per level (hier's local and rail groups); the
  /// world's model takes the rail level's, the slower links of a flat algorithm.
  Result<void> calibrate();
  detail::Algo allreduce_algo(size_t bytes) const noexcept { return select.allreduce(ctx, *world, bytes); }

  /// Fresh tag space for one collective: bit 63 set, sequence in bits 32..62,
  /// the call's signature in bits 20..31 (ranks that disagree on count, dtype,
  /// op or root post tags that never match; finish() then names the
  /// disagreement); the algorithms use bits 0..19.
  uint64_t next_tag_base() noexcept {
    return (1ull << 63) | (static_cast<uint64_t>(++seq & 0x7fffffff) << 32) | (uint64_t{sig & 0xfff} << 20);
  }
  /// The collective about to run, as every rank should see it: sets the tag
  /// signature and counts the call.
  void begin(const detail::CallSig& s) noexcept;
  /// After a timeout: compares this call's signature with the other ranks'
  /// through the store; a kMismatch naming both calls if one differs, else e.
  Error diagnose(Error e);
  /// After a timeout waiting on rank e.peer_rank(): up to min(1 s, timeout/4)
  /// for that rank's own verdict (its announce_abort naming a culprit); that
  /// error if it comes, else e.
  Error await_verdict(Error e);
  /// After a timeout: asks every rank what it is doing (the status service)
  /// and adds to e's cause the awaited rank and every rank not in this
  /// collective, each as alive and where, or not answering.
  Error explain(Error e);
  /// The engine's long-wait warning, handed to the status service so that
  /// it names what the awaited ranks are doing (Engine::LongWait).
  bool long_wait(const char* what, int64_t waited_ms, const std::vector<int>& peers);
  /// Fails fast if an earlier error broke the communicator.
  Result<void> check_usable(const char* what) const;
  /// Argument checks shared by send and recv.
  Result<void> check_p2p(const char* what, const void* buf, size_t bytes, int peer) const;
  /// Records a collective's outcome (marks the communicator broken on error).
  Result<void> finish(Result<void> r, const char* what);
  /// Large point-to-point messages travel as a stream of chunks (both ranks
  /// decide alike from the size), so the sender can stage them.
  bool p2p_chunked(size_t bytes) const noexcept {
    return device->capabilities().allocate_shared && bytes >= opts.stage_min_bytes && bytes > opts.chunk_bytes;
  }
  /// Runs `coll`'s first usable algorithm on the whole communicator, with a
  /// fresh tag.
  Result<void> run_first(detail::Coll coll, detail::CollArgs a) {
    a.tag = next_tag_base();
    return detail::first_usable(coll, ctx, *world, a).run(ctx, *world, a);
  }
};

}  // namespace grex
