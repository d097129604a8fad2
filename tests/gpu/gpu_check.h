// SPDX-License-Identifier: Apache-2.0
// What the GPU checks (collectives_gpu_check.cc) share: the CUDA driver
// calls they make themselves, device buffers, stream-ordered copies, the
// host-computed values they compare against, and the --trace watchdog.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "gpu/cuda_api.h"

namespace grex::gpu_check {

using gpu::CUdeviceptr;
using gpu::CUstream;

inline const gpu::CudaApi* A = nullptr;

// --trace: each rank prints its steps, and a watchdog says where a rank stands
// when it made no step for 10 s (the stream's state too).
struct Tracer {
  bool on = false;
  int rank = 0;
  std::atomic<const char*> last{"start"};
  std::atomic<uint64_t> at_ns{0};
  std::atomic<uint64_t> steps{0};
  CUstream s1 = nullptr, s2 = nullptr;
};
inline Tracer trace;

inline void step(const char* what) {
  trace.last.store(what);
  trace.at_ns.store(now_ns());
  trace.steps.fetch_add(1);
  if (trace.on) {
    std::fprintf(stderr, "[rank %d %.3f s] %s\n", trace.rank, static_cast<double>(now_ns()) / 1e9, what);
    std::fflush(stderr);
  }
}

inline void start_watchdog() {
  if (!trace.on) return;
  std::thread([] {
    uint64_t seen = ~uint64_t{0};
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(10));
      uint64_t n = trace.steps.load();
      if (n == seen) {
        int q1 = trace.s1 != nullptr ? A->cuStreamQuery(trace.s1) : -1;
        int q2 = trace.s2 != nullptr ? A->cuStreamQuery(trace.s2) : -1;
        std::fprintf(stderr, "[rank %d] STUCK 10 s after step '%s' (cuStreamQuery s1=%d s2=%d; 600 = busy)\n",
                     trace.rank, trace.last.load(), q1, q2);
        std::fflush(stderr);
      }
      seen = n;
    }
  }).detach();
}

#define CU_OK(call)                                                                                    \
  do {                                                                                                 \
    gpu::CUresult cu_r_ = (call);                                                                      \
    if (cu_r_ != 0) {                                                                                  \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, A->describe(cu_r_).c_str()); \
      return 1;                                                                                        \
    }                                                                                                  \
  } while (0)

struct Gpu {
  CUstream s1 = nullptr, s2 = nullptr;
  CUdeviceptr busy = 0;  // a big buffer the streams memset, to keep them busy
  size_t busy_bytes = size_t{256} << 20;
};

inline int open_gpu(Gpu& g) {
  auto api = gpu::cuda();
  if (!api) {
    std::fprintf(stderr, "no CUDA: %s\n", api.error().message().c_str());
    return 1;
  }
  A = *api;
  gpu::CUdevice d = 0;
  CU_OK(A->cuDeviceGet(&d, 0));
  gpu::CUcontext ctx = nullptr;
  CU_OK(A->cuDevicePrimaryCtxRetain(&ctx, d));
  CU_OK(A->cuCtxSetCurrent(ctx));
  const unsigned flags = std::getenv("GPU_CHECK_NONBLOCKING") != nullptr ? 1u : 0u;  // CU_STREAM_NON_BLOCKING
  CU_OK(A->cuStreamCreate(&g.s1, flags));
  CU_OK(A->cuStreamCreate(&g.s2, flags));
  trace.s1 = g.s1;
  trace.s2 = g.s2;
  CU_OK(A->cuMemAlloc(&g.busy, g.busy_bytes));
  return 0;
}

// Keeps `s` busy for a while (memsets of 256 MiB), so a collective that did
// not wait for the stream would read its inputs before they were written.
inline int keep_busy(const Gpu& g, CUstream s, int rounds = 32) {
  for (int i = 0; i < rounds; ++i) CU_OK(A->cuMemsetD8Async(g.busy, static_cast<unsigned char>(i), g.busy_bytes, s));
  return 0;
}

// Value of element i on rank r: small integers, exact in every type and any order.
inline double value(int r, size_t i) { return static_cast<double>((r + 1) * static_cast<int>(i % 5 + 1)); }

template <class T>
inline std::vector<T> fill(int r, size_t n, size_t first = 0) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(value(r, first + i));
  return v;
}

struct DevBuf {
  CUdeviceptr p = 0;
  size_t bytes = 0;
  ~DevBuf() {
    if (p != 0) A->cuMemFree(p);
  }
  void* ptr() const { return reinterpret_cast<void*>(p); }
};

inline int dev_alloc(DevBuf& b, size_t bytes) {
  b.bytes = bytes;
  CU_OK(A->cuMemAlloc(&b.p, std::max<size_t>(bytes, 1)));
  return 0;
}

// Stream-ordered copies (host memory pageable: the driver stages it, in order).
inline int to_dev(CUstream s, const DevBuf& d, const void* h, size_t bytes, size_t off = 0) {
  if (bytes > 0) CU_OK(A->cuMemcpyAsync(d.p + off, reinterpret_cast<CUdeviceptr>(h), bytes, s));
  return 0;
}
inline int to_host(CUstream s, void* h, const DevBuf& d, size_t bytes, size_t off = 0) {
  if (bytes > 0) CU_OK(A->cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(h), d.p + off, bytes, s));
  return 0;
}

template <class T>
inline int expect_eq(const char* what, const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    std::fprintf(stderr, "%s: %zu elements, want %zu\n", what, got.size(), want.size());
    return 1;
  }
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      std::fprintf(stderr, "%s: element %zu is %g, want %g\n", what, i, static_cast<double>(got[i]),
                   static_cast<double>(want[i]));
      return 1;
    }
  return 0;
}

}  // namespace grex::gpu_check
