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

}  // namespace

BENCHMARK_MAIN();
