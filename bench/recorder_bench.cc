// SPDX-License-Identifier: Apache-2.0
// The flight recorder's cost per call (issue 30): one start() and one end(),
// as a collective records itself, against an empty loop of the same shape.
// The cost ratio of an 8-byte allreduce is this over its latency (grex-perf).
#include <benchmark/benchmark.h>

#include "collectives/recorder.h"

namespace {

void BM_RecorderStartEnd(benchmark::State& state) {
  grex::detail::Recorder rec(static_cast<size_t>(state.range(0)), 0, "bench");
  uint64_t coll = 0, bytes = 0;
  for (auto _ : state) {
    rec.start("allreduce", ++coll, 2, 0, 0, -1, -1, bytes);
    bytes += 16;
    rec.end(true, bytes);
  }
  benchmark::DoNotOptimize(bytes);
}
BENCHMARK(BM_RecorderStartEnd)->Arg(16)->Arg(2000);

// A call that waits: its entry is written when the wait begins (settle()),
// which the collective's critical path does not see.
void BM_RecorderStartSettleEnd(benchmark::State& state) {
  grex::detail::Recorder rec(static_cast<size_t>(state.range(0)), 0, "bench");
  uint64_t coll = 0, bytes = 0;
  for (auto _ : state) {
    rec.start("allreduce", ++coll, 2, 0, 0, -1, -1, bytes);
    rec.settle();
    bytes += 16;
    rec.end(true, bytes);
  }
  benchmark::DoNotOptimize(bytes);
}
BENCHMARK(BM_RecorderStartSettleEnd)->Arg(2000);

// The baseline: what the loop costs with no recorder at all.
void BM_NoRecorder(benchmark::State& state) {
  uint64_t coll = 0, bytes = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(++coll);
    bytes += 16;
  }
  benchmark::DoNotOptimize(bytes);
}
BENCHMARK(BM_NoRecorder);

}  // namespace

BENCHMARK_MAIN();
