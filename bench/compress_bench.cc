// SPDX-License-Identifier: Apache-2.0
// Throughput of the compressed allreduce's kernels (lib/collectives/
// compress_kernels.h) on one chunk, as the allreduce runs them: a
// chunk_bytes (256 KiB) run of float32 values rounded to bf16, fp16 or int8
// (with a residual, as under error feedback, and without), and the widened
// values added to a float32 input. The chunk stays in L2, as it does in the
// ring, so the rows measure the arithmetic, not memory.
//
// Rows: narrow/<format>_<level>[_res], widen_add/<format>_<level>;
// bytes_per_second counts the float32 values (4 bytes each) the kernel
// handles, so rows of different formats compare directly.
//   build/bench/compress_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "collectives/compress_kernels.h"

namespace grex {
namespace {

using detail::SimdLevel;
constexpr size_t kValues = 256 * 1024 / sizeof(float);

std::vector<float> values(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

size_t wire_bytes(Compression kind, size_t m) {
  if (kind != Compression::kInt8) return 2 * m;
  return detail::int8_bytes(m);
}

bool level_runs(benchmark::State& state, SimdLevel level) {
  if (level <= detail::simd_level()) return true;
  state.SkipWithError("this CPU has no such SIMD level");
  return false;
}

void narrow(benchmark::State& state, Compression kind, SimdLevel level, bool with_residual) {
  if (!level_runs(state, level)) return;
  const std::vector<float> v = values(kValues, 1);
  std::vector<float> res(kValues, 0.f);
  std::vector<uint8_t> w(wire_bytes(kind, kValues));
  float* r = with_residual ? res.data() : nullptr;
  for (auto _ : state) {
    if (kind == Compression::kInt8)
      detail::int8_narrow_at(level, v.data(), kValues, w.data(), r, 1.f);
    else
      detail::narrow_f32_at(level, kind, v.data(), kValues, reinterpret_cast<uint16_t*>(w.data()), r, 1.f);
    benchmark::DoNotOptimize(w.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kValues * sizeof(float)));
}

void widen_add(benchmark::State& state, Compression kind, SimdLevel level) {
  if (!level_runs(state, level)) return;
  const std::vector<float> v = values(kValues, 2), a = values(kValues, 3);
  std::vector<float> out(kValues);
  std::vector<uint8_t> w(wire_bytes(kind, kValues));
  if (kind == Compression::kInt8)
    detail::int8_narrow(v.data(), kValues, w.data(), nullptr, 1.f);
  else
    detail::narrow_f32(kind, v.data(), kValues, reinterpret_cast<uint16_t*>(w.data()), nullptr, 1.f);
  for (auto _ : state) {
    if (kind == Compression::kInt8)
      detail::int8_widen_add_at(level, w.data(), kValues, a.data(), nullptr, out.data());
    else
      detail::widen_add_at(level, kind, reinterpret_cast<const uint16_t*>(w.data()), kValues, a.data(), nullptr,
                           out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kValues * sizeof(float)));
}

#define GREX_FORMAT_ROWS(fmt, kind)                                                                  \
  BENCHMARK_CAPTURE(narrow, fmt##_avx2, kind, SimdLevel::kAvx2, false);                              \
  BENCHMARK_CAPTURE(narrow, fmt##_avx512, kind, SimdLevel::kAvx512, false);                          \
  BENCHMARK_CAPTURE(narrow, fmt##_avx2_res, kind, SimdLevel::kAvx2, true);                           \
  BENCHMARK_CAPTURE(narrow, fmt##_avx512_res, kind, SimdLevel::kAvx512, true);                       \
  BENCHMARK_CAPTURE(widen_add, fmt##_avx2, kind, SimdLevel::kAvx2);                                  \
  BENCHMARK_CAPTURE(widen_add, fmt##_avx512, kind, SimdLevel::kAvx512)
GREX_FORMAT_ROWS(int8, Compression::kInt8);
GREX_FORMAT_ROWS(bf16, Compression::kBf16);
GREX_FORMAT_ROWS(fp16, Compression::kFp16);

}  // namespace
}  // namespace grex

BENCHMARK_MAIN();
