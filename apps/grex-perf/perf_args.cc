// SPDX-License-Identifier: Apache-2.0
// grex-perf's command line, read by CLI11: one option table shared by all modes, each
// option tagged with the modes it applies to, and the value checks of each.
#include "perf_args.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <string>
#include <limits>

namespace grex::perf {
namespace {

// Bit per mode, for the option table.
constexpr unsigned bit(Mode m) { return 1u << static_cast<unsigned>(m); }
constexpr unsigned kColl = bit(Mode::kAllreduce) | bit(Mode::kReduceScatter) | bit(Mode::kAllgather) |
                           bit(Mode::kBroadcast) | bit(Mode::kReduce) | bit(Mode::kAlltoall) |
                           bit(Mode::kSendrecv);
constexpr unsigned kRooted = bit(Mode::kBroadcast) | bit(Mode::kReduce);
constexpr unsigned kBw = bit(Mode::kSendBw) | bit(Mode::kWriteBw);
constexpr unsigned kLat = bit(Mode::kSendLat) | bit(Mode::kWriteLat);
constexpr unsigned kP2p = kBw | kLat;
constexpr unsigned kAny = kColl | kP2p;

struct OptionSpec {
  std::string_view names;    // CLI11's spelling: "-b,--minbytes", "--inplace"
  std::string_view spelled;  // how errors name it: the short form when there is one
  bool takes_value;
  unsigned modes;
};

constexpr std::array kOptions = {
    OptionSpec{"-b,--minbytes", "-b", true, kColl},
    OptionSpec{"-e,--maxbytes", "-e", true, kAny},
    OptionSpec{"-i,--stepbytes", "-i", true, kColl},
    OptionSpec{"-f,--stepfactor", "-f", true, kColl},
    OptionSpec{"-n,--iters", "-n", true, kAny},
    OptionSpec{"-w,--warmup_iters", "-w", true, kAny},
    OptionSpec{"-d,--datatype", "-d", true, kColl},
    OptionSpec{"-o,--op", "-o", true, kColl},
    OptionSpec{"-c,--check", "-c", true, kColl},
    OptionSpec{"-r,--root", "-r", true, kRooted},
    OptionSpec{"--inplace", "--inplace", true, kColl},
    OptionSpec{"-s,--size", "-s", true, kP2p},
    OptionSpec{"-a,--all", "-a", false, kP2p},
    OptionSpec{"-t,--tx-depth", "-t", true, kBw},
    OptionSpec{"-q,--qp", "-q", true, kBw},
    OptionSpec{"-D,--duration", "-D", true, kP2p},
    OptionSpec{"-R,--rdma_cm", "-R", false, kP2p},
    OptionSpec{"-p,--port", "-p", true, kP2p},
    OptionSpec{"--report_gbits", "--report_gbits", false, kBw},
    OptionSpec{"--memcpy-ref", "--memcpy-ref", false, bit(Mode::kSendBw)},
    OptionSpec{"--alloc", "--alloc", false, kAny},
    OptionSpec{"--use_cuda", "--use_cuda", false, kColl},
    OptionSpec{"--compress", "--compress", true, bit(Mode::kAllreduce)},
    OptionSpec{"--deadline", "--deadline", true, bit(Mode::kAllreduce)},
    OptionSpec{"--stats", "--stats", false, kAny},
    OptionSpec{"--backend", "--backend", true, kAny},
    OptionSpec{"--cc", "--cc", true, kAny},
    OptionSpec{"--json", "--json", true, kAny},
    OptionSpec{"--plot", "--plot", true, kAny},
    OptionSpec{"-h,--help", "-h", false, kAny},
};

constexpr std::array<std::pair<std::string_view, Mode>, 11> kModes = {{
    {"allreduce", Mode::kAllreduce},
    {"reduce_scatter", Mode::kReduceScatter},
    {"allgather", Mode::kAllgather},
    {"broadcast", Mode::kBroadcast},
    {"reduce", Mode::kReduce},
    {"alltoall", Mode::kAlltoall},
    {"sendrecv", Mode::kSendrecv},
    {"send_bw", Mode::kSendBw},
    {"send_lat", Mode::kSendLat},
    {"write_bw", Mode::kWriteBw},
    {"write_lat", Mode::kWriteLat},
}};

constexpr std::string_view kModeList =
    "allreduce, reduce_scatter, allgather, broadcast, reduce, alltoall, sendrecv, send_bw, send_lat, write_bw, "
    "write_lat";

Error bad(std::string msg) {
  return Error(Errc::kInvalidArgument, std::move(msg)).hint("see grex-perf --help");
}

Result<int64_t> parse_int(std::string_view text, const OptionSpec& o, int64_t lo, int64_t hi) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi)
    return bad("option " + std::string(o.spelled) + " needs an integer from " + std::to_string(lo) + " to " +
               std::to_string(hi) + ", got '" + std::string(text) + "'");
  return v;
}

Result<std::vector<DataType>> parse_types(std::string_view text) {
  constexpr std::array<std::pair<std::string_view, DataType>, 10> kNames = {{
      {"float", DataType::kFloat32}, {"float32", DataType::kFloat32}, {"f32", DataType::kFloat32},
      {"double", DataType::kFloat64}, {"float64", DataType::kFloat64}, {"f64", DataType::kFloat64},
      {"int32", DataType::kInt32}, {"int", DataType::kInt32},
      {"int64", DataType::kInt64}, {"uint8", DataType::kUint8},
  }};
  if (text == "all")
    return std::vector<DataType>{DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kInt64,
                                 DataType::kUint8};
  for (const auto& [name, t] : kNames)
    if (text == name) return std::vector<DataType>{t};
  return bad("option -d: unknown data type '" + std::string(text) +
             "'; use float, double, int32, int64, uint8 or all");
}

Result<std::vector<ReduceOp>> parse_ops(std::string_view text) {
  constexpr std::array<std::pair<std::string_view, ReduceOp>, 5> kNames = {{
      {"sum", ReduceOp::kSum}, {"prod", ReduceOp::kProd}, {"min", ReduceOp::kMin},
      {"max", ReduceOp::kMax}, {"avg", ReduceOp::kAvg},
  }};
  if (text == "all")
    return std::vector<ReduceOp>{ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
  for (const auto& [name, op] : kNames)
    if (text == name) return std::vector<ReduceOp>{op};
  return bad("option -o: unknown reduction '" + std::string(text) + "'; use sum, prod, min, max, avg or all");
}

// What parse_args saw besides the values themselves, for cross-checks.
struct Seen {
  bool max_bytes = false;
  bool size = false;
  bool iters = false;
};

Result<void> apply(PerfArgs& a, Seen& seen, const OptionSpec& o, std::string_view v) {
  constexpr int64_t kMaxIters = 100'000'000;
  constexpr int64_t kMaxRoot = 1 << 20;
  switch (o.spelled.size() == 2 ? o.spelled[1] : '\0') {
    case 'b': a.min_bytes = GREX_TRY(parse_size(v)); return ok();
    case 'e': {
      size_t s = GREX_TRY(parse_size(v));
      a.max_bytes = a.all_max_bytes = s;
      seen.max_bytes = true;
      return ok();
    }
    case 'i': a.step_bytes = GREX_TRY(parse_size(v)); return ok();
    case 'f': a.step_factor = static_cast<uint64_t>(GREX_TRY(parse_int(v, o, 1, 1 << 20))); return ok();
    case 'n':
      a.iters = static_cast<int>(GREX_TRY(parse_int(v, o, 1, kMaxIters)));
      seen.iters = true;
      return ok();
    case 'w': a.warmup_iters = static_cast<int>(GREX_TRY(parse_int(v, o, 0, kMaxIters))); return ok();
    case 'd': a.types = GREX_TRY(parse_types(v)); return ok();
    case 'o': a.ops = GREX_TRY(parse_ops(v)); return ok();
    case 'c': a.check = GREX_TRY(parse_int(v, o, 0, 1)) == 1; return ok();
    case 'r': a.root = static_cast<int>(GREX_TRY(parse_int(v, o, 0, kMaxRoot))); return ok();
    case 's': a.size_bytes = GREX_TRY(parse_size(v)); seen.size = true; return ok();
    case 'a': a.all_sizes = true; return ok();
    case 't': a.tx_depth = static_cast<int>(GREX_TRY(parse_int(v, o, 1, 1 << 16))); return ok();
    case 'q': a.flows = static_cast<int>(GREX_TRY(parse_int(v, o, 1, kMaxFlows))); return ok();
    case 'p': a.port = static_cast<uint16_t>(GREX_TRY(parse_int(v, o, 1, 65535))); return ok();
    case 'R': a.rdma_cm = true; return ok();
    case 'D': {
      double d = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
      if (v.empty() || ec != std::errc() || end != v.data() + v.size() || !(d > 0) || d > 86400)
        return bad("option -D needs a duration in seconds (above 0, at most 86400), got '" + std::string(v) + "'");
      a.duration_s = d;
      return ok();
    }
    case 'h': a.help = true; return ok();
    default: break;
  }
  if (o.spelled == "--inplace") {
    a.placement = GREX_TRY(parse_int(v, o, 0, 1)) == 1 ? Placement::kInPlace : Placement::kOutOfPlace;
  } else if (o.spelled == "--report_gbits") {
    a.report_gbits = true;
  } else if (o.spelled == "--memcpy-ref") {
    a.memcpy_ref = true;
  } else if (o.spelled == "--alloc") {
    a.shared_buffers = true;
  } else if (o.spelled == "--use_cuda") {
    a.use_cuda = true;
  } else if (o.spelled == "--compress") {
    const auto k = compression_from_name(v);
    if (!k) return bad("option --compress takes bf16, fp16, int8, topk or none, got '" + std::string(v) + "'");
    a.compression = *k;
  } else if (o.spelled == "--deadline") {
    a.deadline_ms = GREX_TRY(parse_int(v, o, 1, 3'600'000));
  } else if (o.spelled == "--stats") {
    a.stats = true;
  } else if (o.spelled == "--backend") {
    if (v.empty()) return bad("option --backend needs a backend name (shm, dpdk, verbs)");
    a.backend = std::string(v);
  } else if (o.spelled == "--cc") {
    if (v.empty()) return bad("option --cc needs a congestion controller name (rttcc, dcqcn, ..., none)");
    a.cc = std::string(v);
  } else if (o.spelled == "--json") {
    if (v.empty()) return bad("option --json needs a file name");
    a.json_path = std::string(v);
  } else if (o.spelled == "--plot") {
    if (v.empty()) return bad("option --plot needs a file name (.png)");
    a.plot_path = std::string(v);
  }
  return ok();
}

Result<void> validate(const PerfArgs& a, const Seen& seen) {
  if (is_collective(a.mode)) {
    if (a.use_cuda && a.shared_buffers)
      return bad("--use_cuda and --alloc exclude each other (GPU memory, or the device's host allocator)");
    if (a.deadline_ms > 0 && a.compression != Compression::kNone)
      return bad("--deadline and --compress exclude each other (a deadline allreduce is not compressed)");
    if (a.deadline_ms > 0 && a.use_cuda) return bad("--deadline takes host buffers");
    if (a.compression != Compression::kNone) {
      if (a.use_cuda) return bad("--compress takes host buffers (the compressed ring runs on the CPU)");
      for (DataType t : a.types)
        if (t != DataType::kFloat32) return bad("--compress takes -d float only");
      for (ReduceOp op : a.ops)
        if (op != ReduceOp::kSum && op != ReduceOp::kAvg) return bad("--compress takes -o sum or avg only");
    }
    if (a.min_bytes > a.max_bytes)
      return bad("-b " + std::to_string(a.min_bytes) + " is larger than -e " + std::to_string(a.max_bytes));
    if (a.step_factor == 1 && a.step_bytes == 0) return bad("-f 1 needs a step of at least 1 byte (-i)");
    if (a.mode == Mode::kSendrecv && a.placement == Placement::kInPlace)
      return bad("sendrecv has no in-place form: its send and receive buffers must not overlap");
    return ok();
  }
  if (seen.size && a.all_sizes) return bad("-s and -a exclude each other");
  if (seen.max_bytes && !a.all_sizes) return bad("-e sets the largest size of -a; add -a or use -s");
  if (a.all_sizes && a.all_max_bytes < kAllSizesMinBytes) return bad("-e must be at least 2 bytes");
  if (seen.size && a.size_bytes == 0) return bad("-s must be at least 1 byte");
  if (seen.iters && a.duration_s > 0) return bad("-n and -D exclude each other");
  return ok();
}

}  // namespace

int PerfArgs::effective_iters() const noexcept {
  if (iters > 0) return iters;
  return is_collective(mode) ? kDefaultCollectiveIters : kDefaultP2pIters;
}

int PerfArgs::effective_warmup() const noexcept {
  if (warmup_iters >= 0) return warmup_iters;
  return is_collective(mode) ? kDefaultCollectiveWarmupIters : kDefaultP2pWarmupIters;
}

Result<size_t> parse_size(std::string_view text) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end == text.data())
    return bad("bad size '" + std::string(text) + "'; use a byte count with an optional K, M or G suffix");
  std::string_view rest(end, static_cast<size_t>(text.data() + text.size() - end));
  unsigned shift = 0;
  if (!rest.empty()) {
    switch (rest.front()) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      case 't': case 'T': shift = 40; break;
      default: break;
    }
    if (shift != 0) rest.remove_prefix(1);
    if (rest == "B" || (shift != 0 && rest == "iB")) rest = {};
  }
  if (!rest.empty())
    return bad("bad size '" + std::string(text) + "'; use a byte count with an optional K, M or G suffix");
  if (v > (std::numeric_limits<uint64_t>::max() >> shift)) return bad("size '" + std::string(text) + "' is too large");
  return static_cast<size_t>(v << shift);
}

Result<PerfArgs> parse_args(std::span<const std::string_view> args) {
  PerfArgs a;
  CLI::App app("grex-perf");
  app.set_help_flag();  // -h is in the table: usage() is the help, and it needs no MODE
  app.allow_extras();   // unknown options are reported below, in this tool's words
  std::string mode_text, host;
  app.add_option("MODE", mode_text);
  CLI::Option* host_opt = app.add_option("HOST", host);
  std::array<CLI::Option*, kOptions.size()> opts{};
  for (size_t k = 0; k < kOptions.size(); ++k) {
    std::string names(kOptions[k].names);
    opts[k] = kOptions[k].takes_value ? app.add_option(names)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
                                      : app.add_flag(names);
  }
  static_assert(kOptions.back().spelled == "-h");
  const size_t help = kOptions.size() - 1;
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes argv reversed
  } catch (const CLI::ArgumentMismatch& e) {
    if (opts[help]->count() > 0) return PerfArgs{.help = true};
    for (size_t k = 0; k < kOptions.size(); ++k)  // CLI11 starts the message with the option's name
      if (std::string_view(e.what()).starts_with(opts[k]->get_name() + ":"))
        return bad("option " + std::string(kOptions[k].spelled) + " needs a value");
    return bad(e.what());
  } catch (const CLI::ParseError& e) {
    if (opts[help]->count() > 0) return PerfArgs{.help = true};
    return bad(e.what());
  }
  if (opts[help]->count() > 0) {
    a.help = true;
    return a;
  }
  if (mode_text.empty()) return bad("missing MODE (" + std::string(kModeList) + ")");
  bool known = false;
  for (const auto& [name, m] : kModes)
    if (mode_text == name) {
      a.mode = m;
      known = true;
    }
  if (!known || args.front() != mode_text)  // MODE comes first, as in perftest and nccl-tests
    return bad("unknown mode '" + std::string(known ? args.front() : mode_text) + "'; use one of " +
               std::string(kModeList));
  std::vector<std::string> extras = app.remaining();
  if (host_opt->count() > 0 && is_collective(a.mode)) extras.insert(extras.begin(), host);
  if (!extras.empty()) return bad("unknown option '" + extras.front() + "'");
  a.server_host = host;  // perftest: `MODE HOST` is the client of the server on HOST

  // The options in the order given, each with its value at that place.
  Seen seen;
  std::array<size_t, kOptions.size()> used{};
  for (const CLI::Option* opt : app.parse_order()) {
    size_t k = static_cast<size_t>(std::find(opts.begin(), opts.end(), opt) - opts.begin());
    if (k == kOptions.size()) continue;  // MODE or HOST
    const OptionSpec& spec = kOptions[k];
    if (!(spec.modes & bit(a.mode)))
      return bad("option " + std::string(spec.spelled) + " does not apply to " + std::string(mode_name(a.mode)));
    std::string value = opt->results().at(used[k]++);
    if (!spec.takes_value && value != "true")  // CLI11 gives a flag "true", or what followed '='
      return bad("option " + std::string(spec.spelled) + " takes no value, got '" + value + "'");
    GREX_TRY(apply(a, seen, spec, value));
  }
  GREX_TRY(validate(a, seen));
  if (a.size_bytes == 0) a.size_bytes = is_lat(a.mode) ? kDefaultLatBytes : kDefaultBwBytes;
  for (size_t i = 0; i < args.size(); ++i) a.command_line += (i == 0 ? "grex-perf " : " ") + std::string(args[i]);
  return a;
}

std::string_view mode_name(Mode m) noexcept {
  for (const auto& [name, mode] : kModes)
    if (mode == m) return name;
  return "?";
}

std::string_view type_label(DataType t) noexcept {
  switch (t) {
    case DataType::kFloat32: return "float";
    case DataType::kFloat64: return "double";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kUint8: return "uint8";
    case DataType::kFloat16: return "half";
    case DataType::kBFloat16: return "bfloat16";
  }
  return "?";
}

std::vector<size_t> collective_sizes(const PerfArgs& a) {
  std::vector<size_t> out;
  for (size_t s = a.min_bytes; s <= a.max_bytes;) {
    out.push_back(s);
    size_t next = a.step_factor > 1 ? s * a.step_factor : s + a.step_bytes;
    bool overflowed = a.step_factor > 1 ? (s != 0 && next / a.step_factor != s) : next < s;
    if (next <= s || overflowed) break;
    s = next;
  }
  return out;
}

std::vector<size_t> p2p_sizes(const PerfArgs& a) {
  if (!a.all_sizes) return {a.size_bytes};
  std::vector<size_t> out;
  for (size_t s = kAllSizesMinBytes; s <= a.all_max_bytes && s != 0; s *= 2) out.push_back(s);
  return out;
}

CommOptions comm_options(const PerfArgs& a) {
  CommOptions o;
  o.backend = a.backend;
  o.cc = a.cc;
  o.precedence = Precedence::kOptions;
  return o;
}

std::string effective_backend(const PerfArgs& a) {
  if (!a.backend.empty()) return a.backend;
  const char* v = std::getenv("GREX_BACKEND");
  return v != nullptr && *v != '\0' ? v : "auto";
}

std::string effective_cc(const PerfArgs& a) {
  if (!a.cc.empty()) return a.cc;
  const char* v = std::getenv("GREX_CC");
  return v != nullptr ? v : "";
}

std::string_view usage() noexcept {
  return "Usage: grex-run -n N [--] grex-perf MODE [options]     (any launcher: grex-run, mpirun, torchrun, srun)\n"
         "       grex-perf P2P_MODE [options]                       (server: waits for one client)\n"
         "       grex-perf P2P_MODE [options] HOST                  (client of the server on HOST)\n"
         "Measures grex on every rank of a job; rank 0 prints (both sides print in server/client runs).\n"
         "\n"
         "Collective modes (nccl-tests):\n"
         "  allreduce       all_reduce_perf: time, algbw, busbw, #wrong per size\n"
         "  reduce_scatter  reduce_scatter_perf\n"
         "  allgather       all_gather_perf\n"
         "  broadcast       broadcast_perf (from -r ROOT)\n"
         "  reduce          reduce_perf (to -r ROOT)\n"
         "  alltoall        alltoall_perf\n"
         "  sendrecv        sendrecv_perf: every rank sends to the next and receives from the\n"
         "                  previous at once (Communicator::sendrecv; out of place only)\n"
         "Point-to-point modes (perftest), between ranks 0 and 1 (others wait):\n"
         "  send_bw         ib_send_bw: rank 0 (the client) streams tagged messages to rank 1\n"
         "  write_bw        ib_write_bw: rank 0 (the client) writes into rank 1's registered buffer\n"
         "  send_lat        ib_send_lat: ping-pong of messages (half round trip)\n"
         "  write_lat       ib_write_lat: ping-pong of one-sided writes with immediate (half round trip)\n"
         "\n"
         "Collective options (nccl-tests):\n"
         "  -b, --minbytes SIZE     smallest size (default 8); sizes take K, M, G suffixes\n"
         "  -e, --maxbytes SIZE     largest size (default 64M)\n"
         "  -f, --stepfactor N      multiply the size by N each step (default 2)\n"
         "  -i, --stepbytes SIZE    add SIZE each step when -f is 1 (default 1M)\n"
         "  -n, --iters N           timed iterations per size (default 20)\n"
         "  -w, --warmup_iters N    untimed iterations per size (default 5)\n"
         "  -d, --datatype TYPE     float, double, int32, int64, uint8 or all (default float)\n"
         "  -o, --op OP             sum, prod, min, max, avg or all (default sum); allgather,\n"
         "                          broadcast and alltoall only move data: they ignore it (redop none)\n"
         "  -r, --root N            broadcast and reduce: the root rank (default 0)\n"
         "  -c, --check 0|1         count wrong elements (default 1); exit 1 if any\n"
         "  --inplace 0|1           only out-of-place (0) or only in-place (1); default both\n"
         "\n"
         "Sizes are bytes of the whole operation, as in nccl-tests: allreduce, broadcast and\n"
         "reduce move size/typesize elements per rank; reduce_scatter, allgather and alltoall\n"
         "move count = size/typesize/ranks per rank (per peer for alltoall), and print size =\n"
         "count * ranks * typesize. busbw = algbw * 2(n-1)/n for allreduce, (n-1)/n for\n"
         "reduce_scatter, allgather and alltoall, 1 for broadcast and reduce.\n"
         "\n"
         "Point-to-point options (perftest):\n"
         "  -s, --size SIZE         message size (default 65536 for *_bw, 2 for *_lat)\n"
         "  -a, --all               every power of two from 2 B to 8M (or -e)\n"
         "  -e, --maxbytes SIZE     largest size of -a\n"
         "  -n, --iters N           messages (*_bw) or round trips (*_lat) per size (default 1000)\n"
         "  -D, --duration SEC      run each size for SEC seconds instead of -n iterations\n"
         "  -w, --warmup_iters N    untimed messages per size (default 5)\n"
         "  -t, --tx-depth N        *_bw: requests in flight per flow (default 128)\n"
         "  -q, --qp N              *_bw: N flows in parallel, each its own device and endpoint\n"
         "                          (a QP on verbs, a reliable flow and port on dpdk; default 1)\n"
         "  -R, --rdma_cm           accepted for perftest scripts: verbs always connects with rdma_cm\n"
         "  -p, --port N            server/client runs: the server's rendezvous TCP port (default 18515)\n"
         "  --report_gbits          *_bw in Gb/sec instead of perftest's MB/sec (2^20 bytes/s)\n"
         "  --memcpy-ref            send_bw: add single-core memcpy bandwidth of each size and the ratio\n"
         "A server/client pair needs no launcher: start `grex-perf write_bw` on one host and\n"
         "`GREX_JOB_TOKEN=<token> grex-perf write_bw HOST` on the other (same options on both;\n"
         "the server prints a random token unless GREX_JOB_TOKEN is set). The client sends;\n"
         "each side prints what it measured.\n"
         "\n"
         "Common options:\n"
         "  --alloc                 buffers from the device's allocator (backend-shared memory), not malloc\n"
         "  --use_cuda              collectives: buffers in GPU 0's memory, grex's stream-ordered calls\n"
         "  --compress bf16|fp16|int8|topk  allreduce: float32 travels compressed (AllreduceOptions; topk: 1 %)\n"
         "                          (timed until the last call's result is in place; checked on the host)\n"
         "  --deadline MS           allreduce: a deadline allreduce (AllreduceOptions::deadline_ms; late input\n"
         "                          dropped)\n"
         "  --stats                 every rank (every flow with -q) prints its transport counters at the end\n"
         "  --backend NAME          backend (shm, dpdk, verbs); wins over GREX_BACKEND\n"
         "  --cc NAME               congestion control per flow, over GREX_CC: rttcc, rttcc-template, dcqcn,\n"
         "                          dcqcn-mlx5, timely, swift, none (dpdk, verbs; --stats shows rate and probes)\n"
         "  --json FILE             also write the rows and the environment (versions, device, options) as JSON\n"
         "  --plot FILE.png         plot bandwidth (latency for *_lat) against size with gnuplot\n"
         "  -h, --help              print this help\n"
         "\n"
         "Timeouts follow GREX_TIMEOUT_MS (default 60 s per call). Sweeps that run longer than\n"
         "a few seconds show a progress line on stderr.\n"
         "Exit status: 0 on success, 1 on a grex error or wrong results, 2 for usage errors.\n";
}

}  // namespace grex::perf
