// SPDX-License-Identifier: Apache-2.0
// Throughput of the sum kernel of lib/collectives/reduce.h (f32, f64) next to
// memcpy, on buffers of 64 KiB .. 256 MiB: what one core can reduce and copy.
//
// bytes_per_second counts memory traffic: a and b read plus dst written for the
// kernel (3 x size), src read plus dst written for memcpy (2 x size).
// payload_per_second counts the bytes of dst produced (1 x size) for both.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "collectives/reduce.h"

namespace grex {
namespace {

constexpr int64_t kMinBytes = int64_t{64} << 10;
constexpr int64_t kMaxBytes = int64_t{256} << 20;
constexpr int kSizeMultiplier = 4;
constexpr size_t kPageBytes = 4096;

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

// A page-aligned buffer with every page touched, filled with `byte`.
Buffer make_buffer(size_t bytes, int byte) {
  size_t rounded = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  Buffer b(static_cast<unsigned char*>(std::aligned_alloc(kPageBytes, rounded)));
  if (b) std::memset(b.get(), byte, rounded);
  return b;
}

void set_rates(benchmark::State& state, size_t bytes, int traffic_multiple) {
  auto iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * traffic_multiple * static_cast<int64_t>(bytes));
  state.counters["payload_per_second"] =
      benchmark::Counter(iters * static_cast<double>(bytes), benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
}

void reduce_sum(benchmark::State& state, DataType type) {
  auto bytes = static_cast<size_t>(state.range(0));
  size_t count = bytes / dtype_size(type);
  // 0x3f bytes are small normal floats and doubles: no denormals, no overflow.
  Buffer a = make_buffer(bytes, 0x3f), b = make_buffer(bytes, 0x3f), dst = make_buffer(bytes, 0);
  if (!a || !b || !dst) {
    state.SkipWithError("out of memory");
    return;
  }
  for (auto _ : state) {
    detail::reduce(dst.get(), a.get(), b.get(), count, type, ReduceOp::kSum);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  set_rates(state, bytes, 3);
}

void copy(benchmark::State& state) {
  auto bytes = static_cast<size_t>(state.range(0));
  Buffer src = make_buffer(bytes, 0x3f), dst = make_buffer(bytes, 0);
  if (!src || !dst) {
    state.SkipWithError("out of memory");
    return;
  }
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  set_rates(state, bytes, 2);
}

BENCHMARK_CAPTURE(reduce_sum, f32, DataType::kFloat32)
    ->RangeMultiplier(kSizeMultiplier)->Range(kMinBytes, kMaxBytes)->UseRealTime();
BENCHMARK_CAPTURE(reduce_sum, f64, DataType::kFloat64)
    ->RangeMultiplier(kSizeMultiplier)->Range(kMinBytes, kMaxBytes)->UseRealTime();
BENCHMARK(copy)->RangeMultiplier(kSizeMultiplier)->Range(kMinBytes, kMaxBytes)->UseRealTime();

}  // namespace
}  // namespace grex

BENCHMARK_MAIN();
