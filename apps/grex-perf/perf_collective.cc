// SPDX-License-Identifier: Apache-2.0
// The allreduce mode: an nccl-tests style sweep over sizes, types and operators,
// timing out-of-place and in-place calls and counting wrong elements.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/clock.h"
#include "perf_check.h"
#include "perf_common.h"

namespace grex::perf {
namespace {

// One (type, op) pass over the sizes shares these.
struct Sweep {
  Communicator& comm;
  const PerfArgs& args;
  void* send;
  void* recv;  // null when only in-place runs
};

// Times one placement of one size; every rank returns the same result.
Result<CollectiveResult> measure(const Sweep& s, size_t count, DataType type, ReduceOp op, bool in_place,
                                 const CheckPattern& pattern) {
  Communicator& comm = s.comm;
  size_t bytes = count * dtype_size(type);
  void* dst = in_place ? s.send : s.recv;
  pattern.fill_input(s.send, count);
  for (int i = 0; i < s.args.effective_warmup(); ++i) GREX_TRY(comm.allreduce(s.send, dst, count, type, op));

  int iters = s.args.effective_iters();
  GREX_TRY(comm.barrier());
  uint64_t t0 = now_ns();
  for (int i = 0; i < iters; ++i) GREX_TRY(comm.allreduce(s.send, dst, count, type, op));
  double time_us = static_cast<double>(now_ns() - t0) / 1e3 / iters;
  GREX_TRY(comm.allreduce(&time_us, 1, DataType::kFloat64, ReduceOp::kMax));  // the slowest rank's average

  CollectiveResult r;
  r.time_us = time_us;
  r.algbw = algbw_gbs(bytes, time_us);
  r.busbw = r.algbw * busbw_factor(Mode::kAllreduce, comm.size());
  if (s.args.check) {
    // Out-of-place output still holds the last timed call's result; in-place
    // calls reduced their own output, so start again from the inputs.
    if (in_place) {
      pattern.fill_input(s.send, count);
      GREX_TRY(comm.allreduce(s.send, s.send, count, type, op));
    }
    auto wrong = static_cast<int64_t>(pattern.count_wrong(dst, count));
    GREX_TRY(comm.allreduce(&wrong, 1, DataType::kInt64, ReduceOp::kSum));
    r.wrong = wrong;
    r.checked = true;
  }
  return r;
}

// "#  Rank  0 Pid  4711 on shm" for every rank (pids gathered with a sum).
Result<std::string> rank_lines(Communicator& comm) {
  std::vector<int64_t> pids(static_cast<size_t>(comm.size()), 0);
  pids[static_cast<size_t>(comm.rank())] = getpid();
  GREX_TRY(comm.allreduce(pids.data(), pids.size(), DataType::kInt64, ReduceOp::kSum));
  std::string out;
  const auto& caps = comm.device().capabilities();
  for (size_t r = 0; r < pids.size(); ++r)
    out += "#  Rank " + std::to_string(r) + " Pid " + std::to_string(pids[r]) + " on " + caps.driver + " device " +
           caps.device_name + "\n";
  return out;
}

std::string preamble(Communicator& comm, const PerfArgs& a) {
  std::string step = a.step_factor > 1 ? std::to_string(a.step_factor) + "(factor)" : std::to_string(a.step_bytes) + "(bytes)";
  return "# grex-perf allreduce  ranks " + std::to_string(comm.size()) + "  backend " +
         comm.device().capabilities().driver + "  buffers " + buffer_kind(comm, a.shared_buffers) + "\n" +
         "# minBytes " + std::to_string(a.min_bytes) + " maxBytes " + std::to_string(a.max_bytes) + " step: " + step +
         " warmup iters: " + std::to_string(a.effective_warmup()) + " iters: " + std::to_string(a.effective_iters()) +
         " validation: " + (a.check ? "1" : "0") + "\n#\n";
}

}  // namespace

Result<int> run_allreduce(Communicator& comm, const PerfArgs& a) {
  std::vector<size_t> sizes = collective_sizes(a);
  size_t max_bytes = sizes.empty() ? 0 : sizes.back();
  bool out_of_place = a.placement != Placement::kInPlace;
  bool in_place = a.placement != Placement::kOutOfPlace;

  PerfBuffer send = GREX_TRY(PerfBuffer::create(comm, max_bytes, a.shared_buffers));
  PerfBuffer recv;
  if (out_of_place) recv = GREX_TRY(PerfBuffer::create(comm, max_bytes, a.shared_buffers));
  Sweep sweep{comm, a, send.data(), recv.data()};

  std::string ranks = GREX_TRY(rank_lines(comm));
  print_rank0(comm, preamble(comm, a) + ranks + "#\n" + collective_header(a.placement));

  int64_t wrong_total = 0;
  double busbw_sum = 0;
  int busbw_count = 0;
  std::vector<JsonObject> json;
  for (DataType type : a.types) {
    for (ReduceOp op : a.ops) {
      CheckPattern pattern(type, op, comm.rank(), comm.size());
      for (size_t size : sizes) {
        size_t count = size / dtype_size(type);
        std::vector<CollectiveResult> groups;
        if (out_of_place) groups.push_back(GREX_TRY(measure(sweep, count, type, op, false, pattern)));
        if (in_place) groups.push_back(GREX_TRY(measure(sweep, count, type, op, true, pattern)));
        size_t bytes = count * dtype_size(type);
        print_rank0(comm, collective_row(bytes, count, type, op, groups));
        for (size_t g = 0; g < groups.size(); ++g) {
          wrong_total += groups[g].wrong;
          busbw_sum += groups[g].busbw;
          ++busbw_count;
          bool ip = groups.size() == 1 ? in_place : g == 1;
          json.push_back({{"size", static_cast<int64_t>(bytes)}, {"count", static_cast<int64_t>(count)},
                          {"type", std::string(type_label(type))}, {"redop", std::string(reduce_op_name(op))},
                          {"placement", std::string(ip ? "in-place" : "out-of-place")},
                          {"time_us", groups[g].time_us}, {"algbw_gbs", groups[g].algbw},
                          {"busbw_gbs", groups[g].busbw},
                          {"wrong", groups[g].checked ? JsonValue{groups[g].wrong} : JsonValue{std::string("N/A")}}});
        }
      }
    }
  }
  double avg_busbw = busbw_count > 0 ? busbw_sum / busbw_count : 0.0;
  char tail[160];
  std::snprintf(tail, sizeof tail, "# Out of bounds values : %lld %s\n# Avg bus bandwidth    : %g \n#\n",
                static_cast<long long>(wrong_total), wrong_total > 0 ? "FAILED" : "OK", avg_busbw);
  print_rank0(comm, tail);
  GREX_TRY(write_json_rows(comm, a,
                           {{"ranks", int64_t{comm.size()}}, {"backend", comm.device().capabilities().driver},
                            {"avg_busbw_gbs", avg_busbw}, {"wrong", wrong_total}},
                           json));
  return wrong_total > 0 ? 1 : 0;
}

}  // namespace grex::perf
