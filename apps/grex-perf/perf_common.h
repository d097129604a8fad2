// SPDX-License-Identifier: Apache-2.0
// What every grex-perf mode shares: benchmark buffers, rank-0 printing, the
// --json writer and the mode entry points.
#pragma once

#include <grex/communicator.h>
#include <grex/result.h>

#include <cstddef>
#include <string>
#include <vector>

#include "perf_args.h"
#include "perf_format.h"
#include "perf_report.h"

namespace grex::perf {

/// A page-aligned, pre-faulted buffer from malloc or from Communicator::alloc.
/// Must not outlive the Communicator it came from.
class PerfBuffer {
 public:
  /// Allocates `bytes` (at least one page); `shared` picks Communicator::alloc.
  static Result<PerfBuffer> create(Communicator& comm, size_t bytes, bool shared);
  PerfBuffer() = default;
  PerfBuffer(PerfBuffer&& o) noexcept;
  PerfBuffer& operator=(PerfBuffer&& o) noexcept;
  PerfBuffer(const PerfBuffer&) = delete;
  PerfBuffer& operator=(const PerfBuffer&) = delete;
  ~PerfBuffer();

  void* data() const noexcept { return ptr_; }
  size_t size() const noexcept { return bytes_; }

 private:
  void release() noexcept;
  Communicator* comm_ = nullptr;  // set when the memory came from Communicator::alloc
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Writes `text` to stdout and flushes, on rank 0 only.
void print_rank0(const Communicator& comm, const std::string& text);
/// "malloc" or "alloc (<driver>-shared)" for headers.
std::string buffer_kind(Communicator& comm, bool shared);
/// On rank 0, writes rows and the environment to args.json_path if --json was given.
Result<void> write_json_rows(Communicator& comm, const PerfArgs& args, const Json& meta,
                             const std::vector<Json>& rows);

/// nccl-tests style sweep of a collective mode (allreduce, reduce_scatter,
/// allgather, broadcast, reduce, alltoall). Returns the exit code: 1 if any
/// element was wrong.
Result<int> run_collective(Communicator& comm, const PerfArgs& args);
/// perftest style bandwidth (send_bw, write_bw) from rank 0 to rank 1 over
/// their own flows (perf_pair.h): no Communicator. Returns the exit code.
Result<int> run_bw(const PerfArgs& args);
/// perftest style ping-pong latency (send_lat, write_lat) between ranks 0 and 1.
Result<int> run_lat(const PerfArgs& args);

}  // namespace grex::perf
