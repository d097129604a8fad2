// SPDX-License-Identifier: Apache-2.0
// grex-perf's arithmetic and output: bus-bandwidth factors, latency statistics,
// nccl-tests and perftest style tables, and the JSON rows of --json.
#pragma once

#include <grex/communicator.h>
#include <grex/result.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "perf_args.h"

namespace grex::perf {

/// busbw / algbw for a collective on `nranks` ranks (nccl-tests PERFORMANCE.md):
/// allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall (n-1)/n (so 0 for
/// one rank); broadcast, reduce 1. Point-to-point modes: 1. 0 for nranks < 1.
double busbw_factor(Mode mode, int nranks) noexcept;

/// The count a collective mode passes for sweep size `size_bytes` (nccl-tests'
/// paramcount, the table's count column): size / type size for allreduce,
/// broadcast and reduce; that divided by `nranks` (rounded down) for
/// reduce_scatter (recvcount), allgather (per-rank sendcount) and alltoall (per peer).
size_t collective_count(Mode mode, size_t size_bytes, DataType type, int nranks) noexcept;
/// The table's size column and algbw's numerator for `count`: count * type size,
/// times `nranks` for reduce_scatter, allgather and alltoall (nccl-tests).
size_t collective_bytes(Mode mode, size_t count, DataType type, int nranks) noexcept;

/// Algorithm bandwidth in GB/s (1e9 bytes) of `bytes` moved in `time_us`; 0 if time is 0.
double algbw_gbs(size_t bytes, double time_us) noexcept;

/// One placement's measurement of one collective size.
struct CollectiveResult {
  double time_us = 0;   ///< slowest rank's average per call
  double algbw = 0;     ///< GB/s
  double busbw = 0;     ///< GB/s
  int64_t wrong = 0;    ///< wrong elements summed over ranks
  bool checked = false; ///< false with -c 0 (printed as N/A)
};

/// The three nccl-tests header lines (group titles, column names, units);
/// `with_root` adds nccl-tests' root column after redop (every mode but allreduce,
/// whose table keeps the columns scripts read).
std::string collective_header(Placement placement, bool with_root = false);
/// One nccl-tests row: size, count, type, redop, then each placement's group.
std::string collective_row(size_t bytes, size_t count, DataType type, ReduceOp op,
                           std::span<const CollectiveResult> groups);
/// The same with redop as text ("none" for data movement) and, when set, a root
/// column (-1 where the collective has none, as nccl-tests prints).
std::string collective_row(size_t bytes, size_t count, DataType type, std::string_view redop,
                           std::optional<int> root, std::span<const CollectiveResult> groups);
/// nccl-tests' time column: 2 decimals below 100 us, 1 below 10 ms, none above.
std::string format_time_us(double us);

/// Summary of per-iteration latencies (microseconds).
struct LatencyStats {
  double min = 0, max = 0, typical = 0, avg = 0, stdev = 0, p99 = 0, p999 = 0;
};
/// Computes min, max, median ("typical" in perftest), mean, population stdev and
/// nearest-rank 99 / 99.9 percentiles. Sorts `samples_us`. Empty input gives zeros.
LatencyStats latency_stats(std::vector<double>& samples_us);

/// perftest's horizontal rule.
std::string p2p_rule();
/// send_bw / write_bw column names; units as perftest's, MB/sec (2^20 bytes) or
/// Gb/sec (1e9 bits); two extra columns (GB/s, ratio) with memcpy_ref.
std::string bw_header(bool gbits, bool memcpy_ref);
/// One send_bw row. Bandwidths are already in the header's unit; memcpy columns
/// are printed when memcpy_gbs >= 0.
std::string bw_row(size_t bytes, int iters, double peak, double avg, double msg_rate_mpps, double memcpy_gbs,
                   double ratio);
/// send_lat column names.
std::string lat_header();
/// One send_lat row.
std::string lat_row(size_t bytes, int iters, const LatencyStats& s);

/// --stats lines of one device: "# stats HEAD: name=value ..." with the
/// counters that are not 0, then one "# stats HEAD flow to rank N: ..." line
/// per flow from the "peer.<N>.<name>" counters.
std::string stats_lines(const std::string& head, const std::vector<std::pair<std::string, uint64_t>>& counters);

/// A JSON value whose objects keep their keys in insertion order (--json's objects and rows).
using Json = nlohmann::ordered_json;
/// Renders {meta..., "environment": {...}, "rows": [row, ...]} with a trailing
/// newline: `meta`'s keys and the environment on the first line, one row per line
/// after it (scripts grep rows), numbers to 6 significant digits; no
/// "environment" key when `environment` is empty. Objects of scalars only.
std::string render_json(const Json& meta, const Json& environment, const std::vector<Json>& rows);
/// Writes `text` to `path` (replacing it); kSystem with errno on failure.
Result<void> write_text_file(const std::string& path, const std::string& text);

}  // namespace grex::perf
