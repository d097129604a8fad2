// SPDX-License-Identifier: Apache-2.0
// Stream-ordered calls on GPU buffers, staged through pinned host memory: the
// mechanics every driver shares (docs/gpudirect.md, "GPU buffers").
//
// A call is built on the caller's thread and enqueued on the caller's CUDA
// stream all at once, so the caller returns at once, as with NCCL:
//
//   stream:  copy in (piece 0) | event in0 | copy in (piece 1) | event in1 | ...
//            | wait ticket t0 | copy out (piece 0) | wait ticket t1 | copy out (piece 1) | ... | event done
//   worker:  wait in0, run piece 0 on host memory, release t0; wait in1, run piece 1, release t1; ...
//
// The stream starts a piece after the work already on it (the copies in come
// after it) and goes on past a piece only once the worker released its ticket
// (cuStreamWaitValue32 on a word of pinned memory), so whatever the caller
// enqueues next sees the result. Copies of later pieces overlap the network
// time of earlier ones. Pinned blocks go back to the pool once `done` fired.
//
// Where the driver lacks stream memory operations (before CUDA 11.7), or
// GREX_GPU_SYNC=1, the caller's thread waits instead: copy in, synchronize
// the stream, run, enqueue the copies out (Stager::stream_waits() is false).
#pragma once

#include <grex/result.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "gpu/cuda_api.h"

namespace grex::gpu {

/// One collective's stream-side state, built by Stager::begin().
struct StagedCall {
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  std::vector<CUevent> inputs;     ///< per piece: recorded after its copies in
  std::vector<uint32_t> tickets;   ///< per piece: the value that lets the stream go on
  CUevent done = nullptr;          ///< after the last copy out
  std::vector<std::pair<void*, size_t>> blocks;  ///< pinned memory it holds
  bool enqueued = false;           ///< something of it is on the stream
  bool ended = false;              ///< `done` was recorded after it
};

class Stager {
 public:
  /// Needs the CUDA driver with the stream calls (kNotFound / kNotSupported).
  /// caller_waits (GREX_GPU_SYNC=1): never make the stream wait for the host.
  static Result<std::unique_ptr<Stager>> create(bool caller_waits = false);
  ~Stager();  ///< waits for every call's copies out, then frees pinned memory
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  /// True when the stream waits for the worker (stream memory operations).
  bool stream_waits() const noexcept { return wait_value_ != nullptr; }

  /// Starts a call on `stream`: takes the context of `any_buffer` (or the
  /// caller's current one) and makes it current on this thread. A stream
  /// being captured into a CUDA graph is refused (kNotSupported): the host
  /// runs the collective, and a graph replays only device work.
  Result<StagedCall> begin(void* stream, const void* any_buffer);
  /// Pinned host memory (at least `bytes`, page aligned) held by `call`.
  Result<uint8_t*> pinned(StagedCall& call, size_t bytes);
  /// Enqueues an asynchronous copy on the call's stream (any direction).
  Result<void> copy(StagedCall& call, void* dst, const void* src, size_t bytes);
  /// Ends the copies in of the next piece (an event on the stream).
  Result<void> end_inputs(StagedCall& call);
  /// Makes the stream wait for piece `i`'s ticket (stream_waits() only).
  Result<void> wait_ticket(StagedCall& call, size_t i);
  /// Makes the stream wait until `ticket` (of any call) was released.
  Result<void> wait_released(StagedCall& call, uint32_t ticket);
  /// Records `done`; the pinned blocks come back once it fired.
  Result<void> end(StagedCall& call);
  /// Synchronizes the call's stream (the caller-waits mode).
  Result<void> sync_stream(StagedCall& call);

  /// On the worker: makes the call's context current and waits for piece i's
  /// inputs to be in pinned memory.
  Result<void> wait_inputs(const StagedCall& call, size_t i);
  /// On the worker: lets the stream go on past piece i. Always called, error or not.
  void release(const StagedCall& call, size_t i) noexcept;
  /// Waits for the call's last copy out (Work completes on it).
  Result<void> wait_done(const StagedCall& call);
  /// Gives the call's events back to the driver and its pinned blocks to the
  /// pool once `done` fired (checked again at each begin()). A call with work
  /// on its stream but no `done` (end() failed) first waits for its stream:
  /// retire such a call only where its tickets were released (the worker).
  void retire(StagedCall&& call) noexcept;

 private:
  Stager(const CudaApi* api, void* flag_host, CUdeviceptr flag_dev, bool caller_waits);
  void reap() noexcept;  // returns the blocks of retired calls whose `done` fired
  Error fail(const char* call, CUresult r) const;

  const CudaApi* api_;
  CUresult (*wait_value_)(CUstream, CUdeviceptr, uint32_t, unsigned) = nullptr;
  uint32_t* flag_host_;      // pinned word the stream waits on
  CUdeviceptr flag_dev_;
  uint32_t next_ticket_ = 0;  // caller's thread
  std::mutex mu_;             // the pool and the retired calls (caller's thread and destructor)
  std::vector<std::pair<void*, size_t>> free_;
  std::deque<StagedCall> retired_;
};

}  // namespace grex::gpu
