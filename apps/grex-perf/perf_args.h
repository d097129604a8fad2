// SPDX-License-Identifier: Apache-2.0
// grex-perf's command line: the modes, their options (nccl-tests and perftest
// spellings) and the size lists they expand to.
#pragma once

#include <grex/communicator.h>
#include <grex/result.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grex::perf {

/// What grex-perf measures.
enum class Mode : uint8_t {
  kAllreduce = 0,      ///< nccl-tests all_reduce_perf
  kSendBw = 1,         ///< perftest ib_send_bw between ranks 0 and 1
  kSendLat = 2,        ///< perftest ib_send_lat between ranks 0 and 1
  kReduceScatter = 3,  ///< nccl-tests reduce_scatter_perf
  kAllgather = 4,      ///< nccl-tests all_gather_perf
  kBroadcast = 5,      ///< nccl-tests broadcast_perf
  kReduce = 6,         ///< nccl-tests reduce_perf
  kAlltoall = 7,       ///< nccl-tests alltoall_perf
  kWriteBw = 8,        ///< perftest ib_write_bw: one-sided writes, rank 0 into rank 1
  kWriteLat = 9,       ///< perftest ib_write_lat: ping-pong of one-sided writes
  kSendrecv = 10,      ///< nccl-tests sendrecv_perf: each rank sends to the next, receives from the previous
};

/// True for the nccl-tests style modes (allreduce, reduce_scatter, ...).
constexpr bool is_collective(Mode m) noexcept {
  return m != Mode::kSendBw && m != Mode::kSendLat && m != Mode::kWriteBw && m != Mode::kWriteLat;
}
/// True for the perftest bandwidth modes (send_bw, write_bw).
constexpr bool is_bw(Mode m) noexcept { return m == Mode::kSendBw || m == Mode::kWriteBw; }
/// True for the perftest latency modes (send_lat, write_lat).
constexpr bool is_lat(Mode m) noexcept { return m == Mode::kSendLat || m == Mode::kWriteLat; }
/// True for the one-sided perftest modes (write_bw, write_lat).
constexpr bool is_write(Mode m) noexcept { return m == Mode::kWriteBw || m == Mode::kWriteLat; }
/// True for collectives that take a reduction operator (-o); the others print redop "none".
constexpr bool mode_reduces(Mode m) noexcept {
  return m == Mode::kAllreduce || m == Mode::kReduceScatter || m == Mode::kReduce;
}
/// True for collectives with a root (-r); the others print root -1 (allreduce prints no root column).
constexpr bool mode_has_root(Mode m) noexcept { return m == Mode::kBroadcast || m == Mode::kReduce; }
/// True when a collective's count is per rank (or per peer) and its size column
/// covers all ranks' blocks: size = count * nranks * type size (nccl-tests).
constexpr bool mode_blocks_per_rank(Mode m) noexcept {
  return m == Mode::kReduceScatter || m == Mode::kAllgather || m == Mode::kAlltoall;
}

/// Which buffer placements a collective mode runs (nccl-tests runs both).
enum class Placement : uint8_t { kBoth = 0, kOutOfPlace = 1, kInPlace = 2 };

constexpr size_t kDefaultCollectiveMinBytes = 8;
constexpr size_t kDefaultCollectiveMaxBytes = size_t{64} << 20;
constexpr size_t kDefaultStepBytes = size_t{1} << 20;
constexpr uint64_t kDefaultStepFactor = 2;
constexpr int kDefaultCollectiveIters = 20;
constexpr int kDefaultCollectiveWarmupIters = 5;
constexpr int kDefaultP2pIters = 1000;
constexpr int kDefaultP2pWarmupIters = 5;
constexpr size_t kDefaultBwBytes = 65536;        // perftest's default message for bandwidth
constexpr size_t kDefaultLatBytes = 2;           // perftest's default message for latency
constexpr size_t kAllSizesMinBytes = 2;          // -a starts here ...
constexpr size_t kAllSizesMaxBytes = size_t{8} << 20;  // ... and stops here unless -e says otherwise
constexpr int kDefaultTxDepth = 128;       // perftest's default TX depth for bandwidth
constexpr int kMaxFlows = 64;              // -q
constexpr uint16_t kDefaultPerfPort = 18515;  // perftest's default port, for server/client runs

/// Everything the command line set. Fields a mode does not use keep their defaults.
struct PerfArgs {
  Mode mode = Mode::kAllreduce;
  bool help = false;

  // Common.
  int iters = 0;                 ///< -n; 0 = the mode's default
  int warmup_iters = -1;         ///< -w; -1 = the mode's default
  bool shared_buffers = false;   ///< --alloc: Communicator::alloc instead of malloc
  bool use_cuda = false;         ///< --use_cuda: collective buffers in GPU 0's memory, stream-ordered calls
  Compression compression = Compression::kNone;  ///< --compress bf16|fp16: allreduce's compressed ring
  int64_t deadline_ms = 0;       ///< --deadline: allreduce as a deadline allreduce (AllreduceOptions)
  std::string backend;           ///< --backend: wins over GREX_BACKEND (comm_options())
  std::string cc;                ///< --cc: congestion control per flow; wins over GREX_CC
  std::string json_path;         ///< --json: rows as JSON (rank 0 writes)
  std::string plot_path;         ///< --plot: bandwidth (or latency) vs size as a PNG (gnuplot)
  bool stats = false;            ///< --stats: each rank prints its transport counters

  // Collective modes.
  size_t min_bytes = kDefaultCollectiveMinBytes;  ///< -b
  size_t max_bytes = kDefaultCollectiveMaxBytes;  ///< -e
  size_t step_bytes = kDefaultStepBytes;          ///< -i (used when -f is 1)
  uint64_t step_factor = kDefaultStepFactor;      ///< -f
  std::vector<DataType> types{DataType::kFloat32};  ///< -d (several with -d all)
  std::vector<ReduceOp> ops{ReduceOp::kSum};        ///< -o (several with -o all); reducing modes only
  int root = 0;                                     ///< -r (broadcast, reduce)
  bool check = true;                                ///< -c
  Placement placement = Placement::kBoth;           ///< --inplace 0|1

  // Point-to-point modes.
  size_t size_bytes = 0;         ///< -s; 0 = the mode's default
  bool all_sizes = false;        ///< -a
  size_t all_max_bytes = kAllSizesMaxBytes;  ///< -e with -a
  int tx_depth = kDefaultTxDepth;            ///< -t: requests in flight per flow (bandwidth modes)
  int flows = 1;                 ///< -q: flows (one device and endpoint each) in parallel
  double duration_s = 0;         ///< -D: seconds per size instead of -n iterations; 0 = off
  bool rdma_cm = false;          ///< -R: accepted; grex's verbs driver always connects through rdma_cm
  bool report_gbits = false;     ///< --report_gbits
  bool memcpy_ref = false;       ///< --memcpy-ref (send_bw)
  std::string server_host;       ///< positional HOST: this process is the client of `grex-perf MODE` on HOST
  uint16_t port = kDefaultPerfPort;  ///< -p: server/client rendezvous port
  bool server_client = false;    ///< run as a server/client pair without a launcher (set by main)

  /// The command line as given, for --json.
  std::string command_line;

  /// Timed iterations per size after defaults.
  int effective_iters() const noexcept;
  /// Warmup iterations per size after defaults.
  int effective_warmup() const noexcept;
};

/// Parses `args` (argv without the program name): MODE first, then options.
/// Errors are kInvalidArgument with a message naming the option.
Result<PerfArgs> parse_args(std::span<const std::string_view> args);

/// Parses "8", "64K", "1M", "2G" (powers of 1024; optional trailing B or iB).
Result<size_t> parse_size(std::string_view text);

/// Name of a mode as typed on the command line.
std::string_view mode_name(Mode m) noexcept;
/// nccl-tests type name: "float", "double", "int32", "int64", "uint8".
std::string_view type_label(DataType t) noexcept;

/// Sizes in bytes a collective mode visits: min, then *factor (or +step) up to max.
std::vector<size_t> collective_sizes(const PerfArgs& a);
/// Sizes a point-to-point mode visits: -s, or with -a powers of two from 2 B to the -e max.
std::vector<size_t> p2p_sizes(const PerfArgs& a);

/// The Communicator options of a collective run: --backend and --cc where
/// given, winning over GREX_BACKEND and GREX_CC (Precedence::kOptions); the
/// variables still fill what the command line leaves out.
CommOptions comm_options(const PerfArgs& a);
/// The backend of a run: --backend, else GREX_BACKEND, else shm.
std::string effective_backend(const PerfArgs& a);
/// The congestion controller of a run: --cc, else GREX_CC; "" for the driver's default.
std::string effective_cc(const PerfArgs& a);

/// The --help text.
std::string_view usage() noexcept;

}  // namespace grex::perf
