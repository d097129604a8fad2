// SPDX-License-Identifier: Apache-2.0
// Stream-ordered collectives on GPU buffers: the mechanics (gpu/stream_ops.h
// draws the stream and the worker side by side). Each call's pieces are
// ordinary host collectives on pinned staging memory; what makes them GPU
// calls is the copies around them on the caller's stream and the tickets that
// hold the stream until the worker finished a piece.
#include <algorithm>
#include <string>
#include <utility>

#include "collectives/comm_impl.h"
#include "collectives/gpu_plan.h"
#include "core/config.h"
#include "core/log.h"

namespace grex {

Result<void> Communicator::Impl::load_gpu_env() {
  if (gpu_env.loaded) return ok();
  GpuEnv e;
  GREX_TRY(config::env_bool("GREX_GPU_SYNC", &e.sync));
  GREX_TRY(config::env_bool("GREX_GPU_STAGING", &e.staging));
  GREX_TRY(config::env_bool("GREX_GPU_IPC_ALL", &e.ipc_all));
  GREX_TRY(config::env_size("GREX_GPU_CHUNK_BYTES", &e.chunk, 4096, uint64_t{1} << 40));
  GREX_TRY(config::env_size("GREX_GPU_IPC_BYTES", &e.ipc_bytes, 1 << 20, uint64_t{1} << 40));
  GREX_TRY(config::env_size("GREX_GPU_IPC_MIN_BYTES", &e.ipc_min_bytes, 0, uint64_t{1} << 40));
  std::string sync = "gpu";
  GREX_TRY(config::env_string("GREX_GPU_IPC_SYNC", &sync));
  if (sync != "gpu" && sync != "host")
    return Error(Errc::kInvalidArgument, "GREX_GPU_IPC_SYNC='" + sync + "'")
        .hint("gpu (the GPU-to-GPU barriers meet on the GPUs, the default) or host (on the communicator's worker)");
  e.ipc_host_sync = sync == "host";
  e.loaded = true;
  gpu_env = e;
  return ok();
}

size_t Communicator::Impl::gpu_chunk_bytes(size_t bytes) const noexcept {
  return detail::staged_piece_bytes(bytes, gpu_env.chunk);
}

Result<WorkPtr> Communicator::Impl::gpu_call(const char* what, GpuStream stream, const void* any_buffer,
                                             size_t pinned_bytes, const GpuPlan& plan) {
  auto named = [&](Error e) { return std::move(e).rank(rank).context(what); };
  if (auto e = load_gpu_env(); !e) return named(std::move(e).error());
  if (!gpu) {
    auto s = gpu::Stager::create(gpu_env.sync);
    if (!s) return named(std::move(s).error());
    gpu = std::move(*s);
  }
  gpu::Stager& st = *gpu;
  auto begun = st.begin(stream.handle, any_buffer);
  if (!begun) return named(std::move(begun).error());
  auto call = std::make_shared<gpu::StagedCall>(std::move(*begun));
  auto abandon = [&](Error e) -> Result<WorkPtr> {
    e = named(std::move(e));
    if (!call->enqueued) {  // nothing on the stream yet: a setup error like any argument error
      st.retire(std::move(*call));
      return e;
    }
    return abandon_gpu_call(call, std::move(e), what);
  };
  uint8_t* base = nullptr;  // none for host buffers: their jobs run on them in place
  if (pinned_bytes > 0) {
    auto pinned = st.pinned(*call, pinned_bytes);
    if (!pinned) return abandon(std::move(pinned).error());
    base = *pinned;
  }
  auto planned = plan(base);
  if (!planned) return abandon(std::move(planned).error());
  std::vector<GpuPiece>& pieces = *planned;
  if (pinned_bytes > 0) ++gpu_staged_calls;
  // Stream: every piece's copies in, each ended by an event.
  for (GpuPiece& p : pieces) {
    for (const GpuCopy& c : p.ins)
      if (auto r = st.copy(*call, base + c.off, c.user, c.bytes); !r) return abandon(std::move(r).error());
    if (auto r = st.end_inputs(*call); !r) return abandon(std::move(r).error());
  }
  if (!st.stream_waits()) {
    // The caller waits: inputs in, the pieces run (inline, or after the
    // queued work), the copies out enqueued. No stream waits on a ticket.
    if (auto r = st.sync_stream(*call); !r) return abandon(std::move(r).error());
    Result<void> outcome = ok();
    for (GpuPiece& p : pieces) {
      Result<void> r = run(std::move(p.job));
      if (!r && outcome) outcome = std::move(r);
    }
    for (GpuPiece& p : pieces)
      for (const GpuCopy& c : p.outs)
        if (auto r = st.copy(*call, const_cast<void*>(c.user), base + c.off, c.bytes); !r)
          return abandon(std::move(r).error());
    if (auto r = st.end(*call); !r) return abandon(std::move(r).error());
    if (outcome) outcome = st.wait_done(*call);
    st.retire(std::move(*call));
    return detail::WorkQueue::completed(std::move(outcome));
  }
  // Stream: per piece, wait for its ticket, then its copies out; then `done`.
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (auto r = st.wait_ticket(*call, i); !r) return abandon(std::move(r).error());
    for (const GpuCopy& c : pieces[i].outs)
      if (auto r = st.copy(*call, const_cast<void*>(c.user), base + c.off, c.bytes); !r)
        return abandon(std::move(r).error());
  }
  if (auto r = st.end(*call); !r) return abandon(std::move(r).error());
  GREX_DEBUG("gpu", "%s: %zu pieces enqueued on stream %p, tickets %u..%u", what, pieces.size(), stream.handle,
             call->tickets.front(), call->tickets.back());
  // Worker: per piece, wait for its inputs, run it, let the stream go on.
  // The last piece's Work completes once the copies out are done.
  WorkPtr last;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const bool is_last = i + 1 == pieces.size();
    last = submit([this, call, i, is_last, what, job = std::move(pieces[i].job)]() mutable -> Result<void> {
      Result<void> r = gpu->wait_inputs(*call, i);
      GREX_DEBUG("gpu", "ticket %u: inputs in pinned memory", call->tickets[i]);
      // A piece this rank cannot run breaks the communicator (the peers are
      // told), so no later call pairs with the peers' half of this one.
      if (!r) r = finish(std::move(r), what);
      if (r) r = job();
      gpu->release(*call, i);
      GREX_DEBUG("gpu", "ticket %u: released (%s)", call->tickets[i], r ? "ok" : "failed");
      if (is_last) {
        if (r) {
          r = gpu->wait_done(*call);
          if (!r) r = finish(std::move(r), what);
        }
        GREX_DEBUG("gpu", "ticket %u: copies out done", call->tickets[i]);
        gpu->retire(std::move(*call));
      }
      return r;
    });
  }
  return last;
}

Result<WorkPtr> Communicator::Impl::abandon_gpu_call(std::shared_ptr<gpu::StagedCall> call, Error e, const char* what) {
  // The stream holds work of this call, and the peers run theirs: the
  // communicator is broken (they are told), and the worker, in its order,
  // lets the stream go on and hands the call's memory back. Releasing the
  // tickets here instead would release earlier calls' too (the stream
  // waits for "at least"), before the worker ran them.
  if (call) (void)gpu->end(*call);
  Error out = e;
  submit([this, call, e = std::move(e), what]() mutable -> Result<void> {
    if (call)
      for (size_t i = 0; i < call->tickets.size(); ++i) gpu->release(*call, i);
    Result<void> r = broken ? Result<void>(*broken) : finish(Result<void>(std::move(e)), what);
    if (call) gpu->retire(std::move(*call));
    return r;
  });
  return out;
}

}  // namespace grex
