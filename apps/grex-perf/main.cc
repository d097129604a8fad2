// SPDX-License-Identifier: Apache-2.0
// grex-perf: parses the command line, connects the job's Communicator and runs one mode.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "perf_common.h"
#include "perf_pair.h"

namespace grex::perf {
namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

/// Collective mode -> entry point; a new mode adds a row here and a case in perf_args.
struct ModeEntry {
  Mode mode;
  Result<int> (*run)(Communicator& comm, const PerfArgs& args);
};

constexpr ModeEntry kModeTable[] = {
    {Mode::kAllreduce, run_collective},
    {Mode::kReduceScatter, run_collective},
    {Mode::kAllgather, run_collective},
    {Mode::kBroadcast, run_collective},
    {Mode::kReduce, run_collective},
    {Mode::kAlltoall, run_collective},
    {Mode::kSendrecv, run_collective},
};

int fail(const Error& e, int code) {
  std::fprintf(stderr, "grex-perf: %s\n", e.message().c_str());
  return code;
}

// One line per rank, in rank order, with the counters that are not zero.
void print_stats(Communicator& comm) {
  for (int r = 0; r < comm.size(); ++r) {
    if (r == comm.rank()) {
      std::string lines =
          stats_lines("rank " + std::to_string(r) + " (" + comm.options().backend + ")", comm.device().counters());
      std::fputs(lines.c_str(), stdout);
      std::fflush(stdout);
    }
    (void)comm.barrier();
  }
}

int perf_main(int argc, char** argv) {
  std::vector<std::string_view> argv_views(argv + 1, argv + argc);
  auto parsed = parse_args(argv_views);
  if (!parsed) return fail(parsed.error(), kExitUsage);
  const PerfArgs& args = *parsed;
  if (args.help) {
    std::fputs(usage().data(), stdout);
    return 0;
  }
  if (!is_collective(args.mode)) {
    // perftest style: own flows between ranks 0 and 1, under a launcher or as
    // a server / client pair (`grex-perf MODE` and `grex-perf MODE HOST`).
    PerfArgs p2p = args;
    p2p.server_client = !args.server_host.empty() || !launched();
    auto rc = is_bw(args.mode) ? run_bw(p2p) : run_lat(p2p);
    if (!rc) return fail(rc.error(), kExitError);
    return *rc;
  }

  auto comm = Communicator::from_env(comm_options(args));
  if (!comm) return fail(comm.error(), kExitError);
  for (const auto& entry : kModeTable) {
    if (entry.mode != args.mode) continue;
    auto rc = entry.run(**comm, args);
    if (!rc) return fail(rc.error(), kExitError);
    if (args.stats) print_stats(**comm);
    return *rc;
  }
  return fail(Error(Errc::kInternal, "no entry point for mode " + std::string(mode_name(args.mode))), kExitError);
}

}  // namespace
}  // namespace grex::perf

int main(int argc, char** argv) { return grex::perf::perf_main(argc, argv); }
