// SPDX-License-Identifier: Apache-2.0
// Throughput of the sum kernels of lib/collectives/reduce.h, every dtype, on
// one core, on buffers of 64 KiB .. 256 MiB, against memcpy of the same size.
//
// Rows
//   reduce_sum/<dtype>/<bytes>          dst = a + b at simd_level() (AVX-512 where there is one)
//   reduce_sum/<dtype>_avx2/<bytes>     the same at the AVX2 level
//   reduce_sum_inplace/f32/<bytes>      a = a + b (dst == a, as when accumulating in place)
//   copy/<bytes>, copy_cached/<bytes>   memcpy, and a copy loop with ordinary stores, alone
//
// bytes_per_second counts memory traffic: a and b read plus dst written for a
// kernel (3 x size), source read plus destination written for a copy (2 x size).
// A reduce row's Time is per iteration, which is a batch of max(1, 64 MiB / size)
// kernel calls (see below); the label says which SIMD level ran.
//
// "Memory-bandwidth bound" is memcpy's bytes_per_second at the same size in the
// same run: vs_memcpy = kernel bytes_per_second / memcpy bytes_per_second. To
// keep the comparison fair, each reduce row measures its own memcpy: every
// iteration times a batch of kernel calls, then a batch of memcpy(dst, a, size)
// (the kernel's own pages, the same number of calls), then a batch of the
// cached-store copy; memcpy_bytes_per_second and vs_memcpy come from the summed
// times. So both see the same pages and the same interference from whatever else
// runs on the machine (batches alternate, milliseconds apart). Between about
// 512 KiB and 1 MiB memcpy's two buffers still fit the 2 MiB L2 where the
// kernel's three do not: there the ratio measures cache capacity, not memory
// bandwidth.
//
// What the ratio does not show: bytes are counted as the program asks for
// them, not as DRAM moves them. A store to a line that is not in cache first
// reads the line (read for ownership), so a kernel writing a separate dst with
// ordinary stores really moves 4 x size, not 3 x. glibc's memcpy switches to
// non-temporal stores from about 3/4 of the shared cache per thread (here
// 181 MiB, see `ld.so --list-diagnostics | grep non_temporal`), which skip that
// read; the kernels do the same from the same size on
// (detail::reduce_streaming_min_bytes()), so at 256 MiB both sides stream and
// vs_memcpy compares like with like. Below it both use ordinary stores.
// Two more counters:
//   vs_cached_copy  kernel vs a copy loop with ordinary stores (at 256 MiB the
//                   copy pays the read for ownership and the kernel does not);
//   reduce_sum_inplace writes into a, whose lines it has just read: no extra read.
// Measured on the 2-core Sapphire Rapids VM (AVX-512, F16C; 2026-11-23, load
// average about 1.5), 256 MiB: 19.6-19.9 GiB/s for f32, f64, i32, i64 and u8
// against memcpy's 19.0, vs_memcpy 1.01-1.03; f16 and bf16 0.93-0.95; AVX2
// 0.87-0.97. Before the kernels streamed, 0.70-0.80 (docs/benchmarks.md).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "collectives/reduce.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace grex {
namespace {

using detail::SimdLevel;

constexpr int64_t kMinBytes = int64_t{64} << 10;
constexpr int64_t kMaxBytes = int64_t{256} << 20;
constexpr int kSizeMultiplier = 4;
constexpr size_t kPageBytes = 4096;
// Calls per timed batch: enough for >= 64 MiB of output (at least one call).
// Long batches keep each measurement mostly in its own steady state (only the
// first call of a batch sees the cache contents the previous batch left) and
// make the clock reads (~20 ns) negligible.
constexpr size_t kBatchBytes = size_t{64} << 20;

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

// A copy with ordinary (cached) stores, the widest vectors the CPU has; bytes
// is a multiple of 64 here.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void copy_cached_avx512(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (size_t i = 0; i < bytes; i += 256) {
    __m512i x0 = _mm512_loadu_si512(s + i), x1 = _mm512_loadu_si512(s + i + 64);
    __m512i x2 = _mm512_loadu_si512(s + i + 128), x3 = _mm512_loadu_si512(s + i + 192);
    _mm512_storeu_si512(d + i, x0);
    _mm512_storeu_si512(d + i + 64, x1);
    _mm512_storeu_si512(d + i + 128, x2);
    _mm512_storeu_si512(d + i + 192, x3);
  }
}
__attribute__((target("avx2"))) void copy_cached_avx2(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (size_t i = 0; i < bytes; i += 128) {
    for (size_t k = 0; k < 128; k += 32)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + k),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + k)));
  }
}
#endif

void copy_cached_any(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  if (detail::simd_level() == SimdLevel::kAvx512) return copy_cached_avx512(dst, src, bytes);
  if (detail::simd_level() == SimdLevel::kAvx2) return copy_cached_avx2(dst, src, bytes);
#endif
  auto* d = static_cast<uint64_t*>(dst);
  const auto* s = static_cast<const uint64_t*>(src);
  for (size_t i = 0; i < bytes / 8; ++i) d[i] = s[i];
}

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

void reduce_sum_impl(benchmark::State& state, DataType type, SimdLevel level, bool in_place) {
  auto bytes = static_cast<size_t>(state.range(0));
  size_t count = bytes / dtype_size(type);
  if (level > detail::simd_level()) {
    state.SkipWithError("SIMD level not supported here");
    return;
  }
  // 0x3f bytes are small normal numbers in every float type: no subnormals, no overflow.
  Buffer a = make_buffer(bytes, 0x3f), b = make_buffer(bytes, 0x3f), dst = make_buffer(bytes, 0);
  if (!a || !b || !dst) {
    state.SkipWithError("out of memory");
    return;
  }
  void* out = in_place ? a.get() : dst.get();
  size_t reps = std::max<size_t>(1, kBatchBytes / bytes);
  double kernel_s = 0, memcpy_s = 0, cached_s = 0;
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    auto t0 = clock::now();
    for (size_t r = 0; r < reps; ++r) {
      detail::reduce_at(level, out, a.get(), b.get(), count, type, ReduceOp::kSum);
      benchmark::ClobberMemory();
    }
    auto t1 = clock::now();
    for (size_t r = 0; r < reps; ++r) {
      std::memcpy(dst.get(), a.get(), bytes);
      benchmark::ClobberMemory();
    }
    auto t2 = clock::now();
    for (size_t r = 0; r < reps; ++r) {
      copy_cached_any(dst.get(), a.get(), bytes);
      benchmark::ClobberMemory();
    }
    auto t3 = clock::now();
    state.SetIterationTime(seconds(t1 - t0));
    kernel_s += seconds(t1 - t0);
    memcpy_s += seconds(t2 - t1);
    cached_s += seconds(t3 - t2);
  }
  auto calls = static_cast<double>(state.iterations()) * static_cast<double>(reps);
  state.SetBytesProcessed(static_cast<int64_t>(calls) * 3 * static_cast<int64_t>(bytes));
  double kernel_rate = 3.0 * static_cast<double>(bytes) * calls / kernel_s;
  double memcpy_rate = 2.0 * static_cast<double>(bytes) * calls / memcpy_s;
  double cached_rate = 2.0 * static_cast<double>(bytes) * calls / cached_s;
  state.counters["memcpy_bytes_per_second"] =
      benchmark::Counter(memcpy_rate, benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
  state.counters["vs_memcpy"] = kernel_rate / memcpy_rate;
  state.counters["vs_cached_copy"] = kernel_rate / cached_rate;
  state.SetLabel(std::string(detail::simd_level_name(level)));
}

void reduce_sum(benchmark::State& state, DataType type, SimdLevel level) {
  reduce_sum_impl(state, type, level, false);
}
void reduce_sum_inplace(benchmark::State& state, DataType type) {
  reduce_sum_impl(state, type, detail::simd_level(), true);
}

template <void (*Copy)(void*, const void*, size_t)>
void copy_row(benchmark::State& state) {
  auto bytes = static_cast<size_t>(state.range(0));
  Buffer src = make_buffer(bytes, 0x3f), dst = make_buffer(bytes, 0);
  if (!src || !dst) {
    state.SkipWithError("out of memory");
    return;
  }
  for (auto _ : state) {
    Copy(dst.get(), src.get(), bytes);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * static_cast<int64_t>(bytes));
}
void libc_memcpy(void* d, const void* s, size_t n) { std::memcpy(d, s, n); }

const SimdLevel kBest = detail::simd_level();

#define GREX_SIZES ->RangeMultiplier(kSizeMultiplier)->Range(kMinBytes, kMaxBytes)
BENCHMARK_CAPTURE(reduce_sum, f32, DataType::kFloat32, kBest) GREX_SIZES->UseManualTime();
BENCHMARK_CAPTURE(reduce_sum, f64, DataType::kFloat64, kBest) GREX_SIZES->UseManualTime();
BENCHMARK_CAPTURE(reduce_sum, i32, DataType::kInt32, kBest) GREX_SIZES->UseManualTime();
BENCHMARK_CAPTURE(reduce_sum, i64, DataType::kInt64, kBest) GREX_SIZES->UseManualTime();
BENCHMARK_CAPTURE(reduce_sum, u8, DataType::kUint8, kBest) GREX_SIZES->UseManualTime();
BENCHMARK_CAPTURE(reduce_sum, f16, DataType::kFloat16, kBest) GREX_SIZES->UseManualTime();
BENCHMARK_CAPTURE(reduce_sum, bf16, DataType::kBFloat16, kBest) GREX_SIZES->UseManualTime();
BENCHMARK_CAPTURE(reduce_sum, f32_avx2, DataType::kFloat32, SimdLevel::kAvx2) GREX_SIZES->UseManualTime();
BENCHMARK_CAPTURE(reduce_sum, f16_avx2, DataType::kFloat16, SimdLevel::kAvx2) GREX_SIZES->UseManualTime();
BENCHMARK_CAPTURE(reduce_sum, bf16_avx2, DataType::kBFloat16, SimdLevel::kAvx2) GREX_SIZES->UseManualTime();
BENCHMARK_CAPTURE(reduce_sum_inplace, f32, DataType::kFloat32) GREX_SIZES->UseManualTime();
BENCHMARK(copy_row<libc_memcpy>)->Name("copy") GREX_SIZES->UseRealTime();
BENCHMARK(copy_row<copy_cached_any>)->Name("copy_cached") GREX_SIZES->UseRealTime();

}  // namespace
}  // namespace grex

BENCHMARK_MAIN();
