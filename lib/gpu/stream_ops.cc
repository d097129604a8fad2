// SPDX-License-Identifier: Apache-2.0
#include "gpu/stream_ops.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>

#include "core/log.h"

namespace grex::gpu {
namespace {

constexpr size_t kMinBlock = 1u << 20;  // pinned blocks come in powers of two from 1 MiB
constexpr size_t kFlagBytes = 4096;

size_t block_size(size_t bytes) {
  size_t s = kMinBlock;
  while (s < bytes) s <<= 1;
  return s;
}

CUdeviceptr dev(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

}  // namespace

Error Stager::fail(const char* call, CUresult r) const {
  return Error(Errc::kSystem, std::string("GPU staging: ") + call + " failed: " + api_->describe(r));
}

Result<std::unique_ptr<Stager>> Stager::create(bool caller_waits) {
  const CudaApi* a = GREX_TRY(cuda());
  if (!a->has_streams)
    return Error(Errc::kNotSupported, "the CUDA driver lacks the stream calls GPU collectives need")
        .hint("update the NVIDIA driver");
  // The flag word needs a context to allocate pinned memory in: the caller's
  // current one, else device 0's primary context.
  CUcontext ctx = nullptr;
  a->cuCtxGetCurrent(&ctx);
  if (ctx == nullptr) {
    CUdevice d = 0;
    if (CUresult r = a->cuDeviceGet(&d, 0); r != 0)
      return Error(Errc::kNotFound, "no CUDA device: cuDeviceGet(0): " + a->describe(r));
    if (CUresult r = a->cuDevicePrimaryCtxRetain(&ctx, d); r != 0)
      return Error(Errc::kSystem, "cuDevicePrimaryCtxRetain: " + a->describe(r));
    a->cuCtxSetCurrent(ctx);
  }
  void* flag = nullptr;
  if (CUresult r = a->cuMemHostAlloc(&flag, kFlagBytes, kHostAllocPortable | kHostAllocDeviceMap); r != 0)
    return Error(Errc::kNoMemory, "cuMemHostAlloc(flag): " + a->describe(r));
  *static_cast<uint32_t*>(flag) = 0;
  CUdeviceptr flag_dev = 0;
  if (CUresult r = a->cuMemHostGetDevicePointer(&flag_dev, flag, 0); r != 0) {
    a->cuMemFreeHost(flag);
    return Error(Errc::kSystem, "cuMemHostGetDevicePointer(flag): " + a->describe(r));
  }
  return std::unique_ptr<Stager>(new Stager(a, flag, flag_dev, caller_waits));
}

Stager::Stager(const CudaApi* api, void* flag_host, CUdeviceptr flag_dev, bool caller_waits)
    : api_(api), flag_host_(static_cast<uint32_t*>(flag_host)), flag_dev_(flag_dev) {
  if (!caller_waits) wait_value_ = api_->cuStreamWaitValue32;
}

Stager::~Stager() {
  std::lock_guard<std::mutex> lock(mu_);
  for (StagedCall& c : retired_) {
    if (c.done != nullptr) api_->cuEventSynchronize(c.done);
    for (CUevent e : c.inputs) api_->cuEventDestroy(e);
    if (c.done != nullptr) api_->cuEventDestroy(c.done);
    for (auto& b : c.blocks) free_.push_back(b);
  }
  for (auto& b : free_) {
    api_->cuMemHostUnregister(b.first);
    ::munmap(b.first, b.second);
  }
  api_->cuMemFreeHost(flag_host_);
}

Result<StagedCall> Stager::begin(void* stream, const void* any_buffer) {
  reap();
  StagedCall c;
  c.stream = static_cast<CUstream>(stream);
  if (any_buffer != nullptr) {
    CUcontext ctx = nullptr;
    if (api_->cuPointerGetAttribute(&ctx, kPointerAttrContext, dev(any_buffer)) == 0) c.ctx = ctx;
  }
  if (c.ctx == nullptr) api_->cuCtxGetCurrent(&c.ctx);
  if (c.ctx == nullptr)
    return Error(Errc::kInvalidArgument, "GPU collective: no CUDA context (none current and the buffer has none)");
  if (CUresult r = api_->cuCtxSetCurrent(c.ctx); r != 0) return fail("cuCtxSetCurrent", r);
  if (api_->cuStreamIsCapturing != nullptr) {
    int capturing = 0;  // CU_STREAM_CAPTURE_STATUS_NONE
    if (api_->cuStreamIsCapturing(c.stream, &capturing) == 0 && capturing != 0)
      return Error(Errc::kNotSupported, "GPU collective on a stream being captured into a CUDA graph")
          .hint("grex's host runs the collective, which a graph cannot replay: call it outside the capture");
  }
  CUevent done = nullptr;
  if (CUresult r = api_->cuEventCreate(&done, kEventDisableTiming); r != 0) return fail("cuEventCreate", r);
  c.done = done;
  return c;
}

Result<uint8_t*> Stager::pinned(StagedCall& call, size_t bytes) {
  const size_t want = block_size(std::max<size_t>(bytes, 1));
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(free_.begin(), free_.end(), [&](const auto& b) { return b.second == want; });
    if (it != free_.end()) {
      call.blocks.push_back(*it);
      free_.erase(it);
      return static_cast<uint8_t*>(call.blocks.back().first);
    }
  }
  // Ordinary anonymous memory, pinned for the GPU's copy engines: every
  // driver takes it as it takes user memory (CMA, verbs registration, DPDK).
  void* p = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return Error(Errc::kNoMemory, "GPU staging: mmap(" + std::to_string(want) + " bytes) failed");
  GREX_DEBUG("gpu", "pinning a %zu-byte staging block", want);
  if (CUresult r = api_->cuMemHostRegister(p, want, kHostRegisterPortable | kHostRegisterDeviceMap); r != 0) {
    ::munmap(p, want);
    return Error(Errc::kNoMemory,
                 "GPU staging: cuMemHostRegister(" + std::to_string(want) + " bytes): " + api_->describe(r));
  }
  call.blocks.emplace_back(p, want);
  return static_cast<uint8_t*>(p);
}

Result<void> Stager::copy(StagedCall& call, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return ok();
  call.enqueued = true;
  if (CUresult r = api_->cuMemcpyAsync(dev(dst), dev(src), bytes, call.stream); r != 0) return fail("cuMemcpyAsync", r);
  return ok();
}

Result<void> Stager::end_inputs(StagedCall& call) {
  CUevent e = nullptr;
  if (CUresult r = api_->cuEventCreate(&e, kEventDisableTiming); r != 0) return fail("cuEventCreate", r);
  call.inputs.push_back(e);
  call.enqueued = true;
  if (CUresult r = api_->cuEventRecord(e, call.stream); r != 0) return fail("cuEventRecord", r);
  call.tickets.push_back(++next_ticket_);
  return ok();
}

Result<void> Stager::wait_ticket(StagedCall& call, size_t i) { return wait_released(call, call.tickets.at(i)); }

Result<void> Stager::wait_released(StagedCall& call, uint32_t ticket) {
  if (CUresult r = wait_value_(call.stream, flag_dev_, ticket, kStreamWaitValueGeq); r != 0)
    return fail("cuStreamWaitValue32", r);
  return ok();
}

Result<void> Stager::end(StagedCall& call) {
  if (CUresult r = api_->cuEventRecord(call.done, call.stream); r != 0) return fail("cuEventRecord", r);
  call.ended = true;
  return ok();
}

Result<void> Stager::sync_stream(StagedCall& call) {
  if (CUresult r = api_->cuStreamSynchronize(call.stream); r != 0) return fail("cuStreamSynchronize", r);
  return ok();
}

Result<void> Stager::wait_inputs(const StagedCall& call, size_t i) {
  if (CUresult r = api_->cuCtxSetCurrent(call.ctx); r != 0) return fail("cuCtxSetCurrent", r);
  if (CUresult r = api_->cuEventSynchronize(call.inputs.at(i)); r != 0) return fail("waiting for the copy in", r);
  return ok();
}

void Stager::release(const StagedCall& call, size_t i) noexcept {
  // Everything the worker wrote to pinned memory is visible before the flag
  // (x86 stores are ordered; the release fence keeps the compiler honest).
  // Only ever forward (cyclically): a call abandoned on the caller's thread
  // may release its tickets while the worker still releases earlier ones.
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the pinned writes before the flag, for the GPU too
  std::atomic_ref<uint32_t> flag(*flag_host_);
  const uint32_t t = call.tickets.at(i);
  uint32_t cur = flag.load(std::memory_order_relaxed);
  while (static_cast<int32_t>(t - cur) > 0 && !flag.compare_exchange_weak(cur, t, std::memory_order_release)) {
  }
}

Result<void> Stager::wait_done(const StagedCall& call) {
  if (CUresult r = api_->cuEventSynchronize(call.done); r != 0) return fail("waiting for the copy out", r);
  return ok();
}

void Stager::retire(StagedCall&& call) noexcept {
  // No `done` after work of it on the stream: its copies may still run.
  if (call.enqueued && !call.ended) api_->cuStreamSynchronize(call.stream);
  std::lock_guard<std::mutex> lock(mu_);
  retired_.push_back(std::move(call));
}

void Stager::reap() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  while (!retired_.empty()) {
    StagedCall& c = retired_.front();
    if (c.done != nullptr && api_->cuEventQuery(c.done) == kErrorNotReady) break;  // in order on their streams, mostly
    for (CUevent e : c.inputs) api_->cuEventDestroy(e);
    if (c.done != nullptr) api_->cuEventDestroy(c.done);
    for (auto& b : c.blocks) free_.push_back(b);
    retired_.pop_front();
  }
}

}  // namespace grex::gpu
