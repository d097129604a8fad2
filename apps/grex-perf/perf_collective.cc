// SPDX-License-Identifier: Apache-2.0
// The collective modes (allreduce, reduce_scatter, allgather, broadcast, reduce,
// alltoall, sendrecv): nccl-tests style sweeps over sizes, types and operators, timing
// out-of-place and in-place calls and counting wrong elements.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <grex/cuda.h>

#include "perf_clock.h"
#include "perf_check.h"
#include "perf_common.h"

namespace grex::perf {
namespace {

// One (type, op) pass over the sizes shares these.
struct Sweep {
  Communicator& comm;
  const PerfArgs& args;
  unsigned char* send;
  unsigned char* recv;  // null when only in-place runs
  int corrupt_rank = -1;  // GREX_PERF_CORRUPT_RANK: this rank spoils one output element per check
  // --use_cuda: send and recv are GPU memory; inputs are written and outputs
  // checked in these host copies of the same layout.
  unsigned char* host_send = nullptr;
  unsigned char* host_recv = nullptr;
};

// GPU memory from grex/cuda.h, freed with the sweep.
struct DeviceBuffer {
  void* ptr = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { (void)grex::cuda::free(ptr); }
};

// The buffers one rank passes to one call, where its input goes and where its
// output is read (collective_input_elems / collective_output_elems elements).
struct CallBuffers {
  const void* send = nullptr;
  void* recv = nullptr;
  void* input = nullptr;
  void* output = nullptr;
};

// nccl-tests' placements: in place, reduce_scatter's output is block `rank` of its
// input and allgather's input is block `rank` of its output; broadcast runs out of
// place as the root sending from its send buffer into the others' receive buffers.
CallBuffers place(Mode mode, bool in_place, const Sweep& s, size_t block, int root) {
  int rank = s.comm.rank();
  unsigned char* own = s.send + static_cast<size_t>(rank) * block;
  switch (mode) {
    case Mode::kReduceScatter:
      return in_place ? CallBuffers{s.send, own, s.send, own} : CallBuffers{s.send, s.recv, s.send, s.recv};
    case Mode::kAllgather:
      return in_place ? CallBuffers{own, s.send, own, s.send} : CallBuffers{s.send, s.recv, s.send, s.recv};
    case Mode::kBroadcast: {
      unsigned char* buf = in_place || rank == root ? s.send : s.recv;
      return CallBuffers{buf, buf, buf, buf};
    }
    case Mode::kAllreduce:
    case Mode::kReduce:
    case Mode::kAlltoall:
    case Mode::kSendrecv:
    case Mode::kSendBw:
    case Mode::kWriteBw:
    case Mode::kWriteLat:
    case Mode::kSendLat: break;
  }
  return in_place ? CallBuffers{s.send, s.send, s.send, s.send} : CallBuffers{s.send, s.recv, s.send, s.recv};
}

// The stream-ordered form (legacy default stream): returns once queued.
Result<WorkPtr> call_stream(Communicator& comm, Mode mode, const CallBuffers& b, size_t count, DataType type,
                            ReduceOp op, int root) {
  const GpuStream s{};
  switch (mode) {
    case Mode::kAllreduce: return comm.allreduce(b.send, b.recv, count, type, op, s);
    case Mode::kReduceScatter: return comm.reduce_scatter(b.send, b.recv, count, type, op, s);
    case Mode::kAllgather: return comm.allgather(b.send, b.recv, count, type, s);
    case Mode::kBroadcast: return comm.broadcast(b.recv, count, type, root, s);
    case Mode::kReduce: return comm.reduce(b.send, b.recv, count, type, op, root, s);
    case Mode::kAlltoall: return comm.alltoall(b.send, b.recv, count, type, s);
    case Mode::kSendrecv: {
      const int n = comm.size();
      const size_t len = count * dtype_size(type);
      return comm.sendrecv(b.send, len, (comm.rank() + 1) % n, b.recv, len, (comm.rank() + n - 1) % n, 0, s);
    }
    case Mode::kSendBw:
    case Mode::kWriteBw:
    case Mode::kWriteLat:
    case Mode::kSendLat: break;
  }
  return Error(Errc::kInternal, "grex-perf: " + std::string(mode_name(mode)) + " is not a collective");
}

Result<void> call(Communicator& comm, Mode mode, const CallBuffers& b, size_t count, DataType type, ReduceOp op,
                  int root, const PerfArgs& args) {
  switch (mode) {
    case Mode::kAllreduce:
      if (args.compression != Compression::kNone || args.deadline_ms > 0) {
        AllreduceOptions o;
        o.compression = args.compression;
        o.deadline_ms = args.deadline_ms;
        return comm.allreduce(b.send, b.recv, count, type, op, o);
      }
      return comm.allreduce(b.send, b.recv, count, type, op);
    case Mode::kReduceScatter: return comm.reduce_scatter(b.send, b.recv, count, type, op);
    case Mode::kAllgather: return comm.allgather(b.send, b.recv, count, type);
    case Mode::kBroadcast: return comm.broadcast(b.recv, count, type, root);
    case Mode::kReduce: return comm.reduce(b.send, b.recv, count, type, op, root);
    case Mode::kAlltoall: return comm.alltoall(b.send, b.recv, count, type);
    case Mode::kSendrecv: {
      const int n = comm.size();
      const size_t len = count * dtype_size(type);
      return comm.sendrecv(b.send, len, (comm.rank() + 1) % n, b.recv, len, (comm.rank() + n - 1) % n, 0);
    }
    case Mode::kSendBw:
    case Mode::kWriteBw:
    case Mode::kWriteLat:
    case Mode::kSendLat: break;
  }
  return Error(Errc::kInternal, "grex-perf: " + std::string(mode_name(mode)) + " is not a collective");
}

// Times one placement of one size (`count` as the call takes it); every rank
// returns the same result.
// The row's time and bandwidths, nccl-tests' way.
CollectiveResult timed(Mode mode, size_t count, DataType type, int n, double time_us) {
  CollectiveResult r;
  r.time_us = time_us;
  r.algbw = algbw_gbs(collective_bytes(mode, count, type, n), time_us);
  r.busbw = r.algbw * busbw_factor(mode, n);
  return r;
}

// --use_cuda: the same measurement with GPU buffers. Calls are queued on the
// stream back to back; the time ends when the last one's result is in place
// (its Work completes on the stream's event; calls complete in order).
Result<CollectiveResult> measure_cuda(const Sweep& s, size_t count, DataType type, ReduceOp op, bool in_place,
                                      const CheckPattern& pattern) {
  Communicator& comm = s.comm;
  Mode mode = s.args.mode;
  int root = s.args.root, rank = comm.rank(), n = comm.size();
  const size_t block = count * dtype_size(type), es = dtype_size(type);
  CallBuffers b = place(mode, in_place, s, block, root);
  Sweep hs = s;
  hs.send = s.host_send;
  hs.recv = s.host_recv;
  CallBuffers h = place(mode, in_place, hs, block, root);
  size_t in_elems = collective_input_elems(mode, count, n, rank, root);
  size_t out_elems = collective_output_elems(mode, count, n, rank, root);
  pattern.fill_input(h.input, in_elems);
  GREX_TRY(grex::cuda::copy(b.input, h.input, in_elems * es));
  auto run = [&](int times) -> Result<void> {
    WorkPtr last;
    for (int i = 0; i < times; ++i) last = GREX_TRY(call_stream(comm, mode, b, count, type, op, root));
    if (last) GREX_TRY(last->wait());
    return ok();
  };
  GREX_TRY(run(s.args.effective_warmup()));
  int iters = s.args.effective_iters();
  GREX_TRY(comm.barrier());
  uint64_t t0 = now_ns();
  GREX_TRY(run(iters));
  double time_us = static_cast<double>(now_ns() - t0) / 1e3 / iters;
  GREX_TRY(comm.allreduce(&time_us, 1, DataType::kFloat64, ReduceOp::kMax));

  CollectiveResult r = timed(mode, count, type, n, time_us);
  if (s.args.check) {
    poison(h.output, out_elems, type);
    GREX_TRY(grex::cuda::copy(b.output, h.output, out_elems * es));
    pattern.fill_input(h.input, in_elems);
    GREX_TRY(grex::cuda::copy(b.input, h.input, in_elems * es));
    GREX_TRY(run(1));
    GREX_TRY(grex::cuda::copy(h.output, b.output, out_elems * es));
    if (rank == s.corrupt_rank && out_elems > 0) static_cast<unsigned char*>(h.output)[es - 1] ^= 0x40;
    auto wrong = static_cast<int64_t>(count_wrong_output(mode, pattern, h.output, count, root));
    GREX_TRY(comm.allreduce(&wrong, 1, DataType::kInt64, ReduceOp::kSum));
    r.wrong = wrong;
    r.checked = true;
  }
  return r;
}

Result<CollectiveResult> measure(const Sweep& s, size_t count, DataType type, ReduceOp op, bool in_place,
                                 const CheckPattern& pattern) {
  if (s.host_send != nullptr) return measure_cuda(s, count, type, op, in_place, pattern);
  Communicator& comm = s.comm;
  Mode mode = s.args.mode;
  int root = s.args.root, rank = comm.rank(), n = comm.size();
  CallBuffers b = place(mode, in_place, s, count * dtype_size(type), root);
  size_t in_elems = collective_input_elems(mode, count, n, rank, root);
  size_t out_elems = collective_output_elems(mode, count, n, rank, root);
  pattern.fill_input(b.input, in_elems);
  for (int i = 0; i < s.args.effective_warmup(); ++i) GREX_TRY(call(comm, mode, b, count, type, op, root, s.args));

  int iters = s.args.effective_iters();
  GREX_TRY(comm.barrier());
  uint64_t t0 = now_ns();
  for (int i = 0; i < iters; ++i) GREX_TRY(call(comm, mode, b, count, type, op, root, s.args));
  double time_us = static_cast<double>(now_ns() - t0) / 1e3 / iters;
  GREX_TRY(comm.allreduce(&time_us, 1, DataType::kFloat64, ReduceOp::kMax));  // the slowest rank's average

  CollectiveResult r = timed(mode, count, type, n, time_us);
  if (s.args.check) {
    // One more call from fresh inputs (in-place calls overwrote them) into a
    // poisoned output, so that a call that writes nothing is counted wrong.
    poison(b.output, out_elems, type);
    pattern.fill_input(b.input, in_elems);
    GREX_TRY(call(comm, mode, b, count, type, op, root, s.args));
    if (rank == s.corrupt_rank && out_elems > 0)  // self-test of -c: one element made wrong on purpose
      static_cast<unsigned char*>(b.output)[dtype_size(type) - 1] ^= 0x40;
    auto wrong = static_cast<int64_t>(count_wrong_output(mode, pattern, b.output, count, root));
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

std::string preamble(Communicator& comm, const PerfArgs& a, const std::string& gpu) {
  std::string step = a.step_factor > 1 ? std::to_string(a.step_factor) + "(factor)" : std::to_string(a.step_bytes) + "(bytes)";
  return "# grex-perf " + std::string(mode_name(a.mode)) + "  ranks " + std::to_string(comm.size()) + "  backend " +
         comm.device().capabilities().driver + "  buffers " +
         (a.use_cuda ? "cuda (GPU 0: " + gpu + ")" : buffer_kind(comm, a.shared_buffers)) + "\n" +
         "# minBytes " + std::to_string(a.min_bytes) + " maxBytes " + std::to_string(a.max_bytes) + " step: " + step +
         " warmup iters: " + std::to_string(a.effective_warmup()) + " iters: " + std::to_string(a.effective_iters()) +
         " validation: " + (a.check ? "1" : "0") + "\n# topology: " + comm.topology() + "\n#\n";
}

}  // namespace

Result<int> run_collective(Communicator& comm, const PerfArgs& a) {
  if (mode_has_root(a.mode) && a.root >= comm.size())
    return Error(Errc::kInvalidArgument, std::string(mode_name(a.mode)) + ": -r " + std::to_string(a.root) +
                                             " is not a rank of 0.." + std::to_string(comm.size() - 1))
        .hint("pick a root below the number of ranks (grex-run -n)");
  // allreduce keeps its table without the root column (bench/compare_openmpi.sh reads it).
  bool root_column = a.mode != Mode::kAllreduce;
  std::optional<int> root_label;
  if (root_column) root_label = mode_has_root(a.mode) ? a.root : -1;
  std::vector<ReduceOp> ops = mode_reduces(a.mode) ? a.ops : std::vector<ReduceOp>{ReduceOp::kSum};

  const uint64_t inter_host_before = comm.stats().bytes_inter_host;  // the calibration's are not this mode's
  std::vector<size_t> sizes = collective_sizes(a);
  size_t max_bytes = sizes.empty() ? 0 : sizes.back();  // every mode's buffers fit in its sweep size
  // sendrecv runs out of place only (its buffers must not overlap).
  const Placement placement = a.mode == Mode::kSendrecv ? Placement::kOutOfPlace : a.placement;
  bool out_of_place = placement != Placement::kInPlace;
  bool in_place = placement != Placement::kOutOfPlace;

  PerfBuffer send = GREX_TRY(PerfBuffer::create(comm, max_bytes, a.shared_buffers));
  PerfBuffer recv;
  if (out_of_place) recv = GREX_TRY(PerfBuffer::create(comm, max_bytes, a.shared_buffers));
  Sweep sweep{comm, a, static_cast<unsigned char*>(send.data()), static_cast<unsigned char*>(recv.data())};
  DeviceBuffer dsend, drecv;
  std::string gpu;
  if (a.use_cuda) {  // the host buffers above become the check's copies
    gpu = GREX_TRY_CTX(grex::cuda::describe(0), "grex-perf --use_cuda");
    dsend.ptr = GREX_TRY_CTX(grex::cuda::alloc(send.size()), "grex-perf --use_cuda: send buffer");
    if (out_of_place) drecv.ptr = GREX_TRY_CTX(grex::cuda::alloc(recv.size()), "grex-perf --use_cuda: recv buffer");
    sweep.host_send = sweep.send;
    sweep.host_recv = sweep.recv;
    sweep.send = static_cast<unsigned char*>(dsend.ptr);
    sweep.recv = static_cast<unsigned char*>(drecv.ptr);
  }
  if (const char* c = std::getenv("GREX_PERF_CORRUPT_RANK"); c != nullptr && *c != '\0') sweep.corrupt_rank = std::atoi(c);

  std::string ranks = GREX_TRY(rank_lines(comm));
  print_rank0(comm, preamble(comm, a, gpu) + ranks + "#\n" + collective_header(placement, root_column));

  int64_t wrong_total = 0;
  double busbw_sum = 0;
  int busbw_count = 0;
  std::vector<Json> json;
  // --plot draws busbw of the first type and operator, one line per placement.
  std::string first = std::string(type_label(a.types.front())) +
                      (mode_reduces(a.mode) ? " " + std::string(reduce_op_name(ops.front())) : "");
  PlotData plot{"grex-perf " + std::string(mode_name(a.mode)) + ", " + std::to_string(comm.size()) + " ranks (" +
                    comm.device().capabilities().driver + ")",
                "busbw (GB/s)", {}, {}};
  if (out_of_place) plot.series.push_back("out-of-place, " + first);
  if (in_place) plot.series.push_back("in-place, " + first);
  Progress progress(comm.rank() == 0, a.types.size() * ops.size() * sizes.size());
  size_t steps = 0;
  for (DataType type : a.types) {
    for (ReduceOp op : ops) {
      CheckPattern pattern(type, op, comm.rank(), comm.size());
      std::string redop(mode_reduces(a.mode) ? reduce_op_name(op) : "none");
      for (size_t size : sizes) {
        size_t count = collective_count(a.mode, size, type, comm.size());
        std::vector<CollectiveResult> groups;
        if (out_of_place) groups.push_back(GREX_TRY(measure(sweep, count, type, op, false, pattern)));
        if (in_place) groups.push_back(GREX_TRY(measure(sweep, count, type, op, true, pattern)));
        size_t bytes = collective_bytes(a.mode, count, type, comm.size());
        print_rank0(comm, collective_row(bytes, count, type, redop, root_label, groups));
        if (type == a.types.front() && op == ops.front()) {
          plot.points.push_back({bytes, {}});
          for (const auto& g : groups) plot.points.back().y.push_back(g.busbw);
        }
        progress.step(++steps, std::string(type_label(type)) + " " + redop + " " + std::to_string(bytes) + " B");
        for (size_t g = 0; g < groups.size(); ++g) {
          wrong_total += groups[g].wrong;
          busbw_sum += groups[g].busbw;
          ++busbw_count;
          bool ip = groups.size() == 1 ? in_place : g == 1;
          Json row{{"size", bytes}, {"count", count}, {"type", type_label(type)}, {"redop", redop}};
          if (root_label) row["root"] = *root_label;
          row["placement"] = ip ? "in-place" : "out-of-place";
          if (a.mode == Mode::kAllreduce) row["algorithm"] = comm.allreduce_algorithm(bytes);
          row["time_us"] = groups[g].time_us;
          row["algbw_gbs"] = groups[g].algbw;
          row["busbw_gbs"] = groups[g].busbw;
          row["wrong"] = groups[g].checked ? Json(groups[g].wrong) : Json("N/A");
          json.push_back(std::move(row));
        }
      }
    }
  }
  progress.done();
  double avg_busbw = busbw_count > 0 ? busbw_sum / busbw_count : 0.0;
  char tail[160];
  std::snprintf(tail, sizeof tail, "# Out of bounds values : %lld %s\n# Avg bus bandwidth    : %g \n#\n",
                static_cast<long long>(wrong_total), wrong_total > 0 ? "FAILED" : "OK", avg_busbw);
  print_rank0(comm, tail);
  GREX_TRY(write_json_rows(comm, a,
                           {{"ranks", int64_t{comm.size()}}, {"backend", comm.device().capabilities().driver},
                            {"topology", comm.topology()},
                            {"bytes_inter_host", comm.stats().bytes_inter_host - inter_host_before},
                            {"buffers", a.use_cuda ? "cuda" : buffer_kind(comm, a.shared_buffers)},
                            {"gpu_direct_calls", comm.stats().gpu_direct}, {"gpu_staged_calls", comm.stats().gpu_staged},
                            {"avg_busbw_gbs", avg_busbw}, {"wrong", wrong_total}},
                           json));
  if (!a.plot_path.empty() && comm.rank() == 0) GREX_TRY(write_plot(a.plot_path, plot));
  // Every rank exits 1 on wrong results, and a launcher stops the job at the
  // first failed rank: wait until rank 0 has printed everything.
  GREX_TRY(comm.barrier());
  return wrong_total > 0 ? 1 : 0;
}

}  // namespace grex::perf
