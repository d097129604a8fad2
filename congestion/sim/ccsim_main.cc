// SPDX-License-Identifier: Apache-2.0
// grex-ccsim: the incast simulator's command line (sim.h has the model,
// README.md the options and metrics).
#include <cstdio>
#include <string>

#include "congestion/sim/fabric.h"
#include "congestion/sim/sim.h"

namespace {

bool write_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "grex-ccsim: cannot write %s\n", path.c_str());
    return false;
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok;
}

// grex-ccsim --topology leaf-spine ...: the fabric (fabric.h).
int fabric_main(int argc, char** argv) {
  using namespace grex::ccsim;
  FabricCli cli;
  std::string error;
  if (!parse_fabric_args(argc, argv, &cli, &error)) {
    std::fprintf(stderr, "grex-ccsim: %s\n%s", error.c_str(), fabric_usage().c_str());
    return 2;
  }
  if (cli.help) {
    std::fputs(fabric_usage().c_str(), stdout);
    return 0;
  }
  FabricResult r;
  if (!run_fabric(cli.cfg, &r, &error)) {
    std::fprintf(stderr, "grex-ccsim: %s\n", error.c_str());
    return 2;
  }
  const std::string json = to_json(cli.cfg, r);
  if (!cli.csv_path.empty() && !write_file(cli.csv_path, series_csv(r))) return 1;
  if (cli.json_path.empty()) {
    std::fputs(json.c_str(), stdout);
    return 0;
  }
  if (!write_file(cli.json_path, json)) return 1;
  std::printf("%s %s L=%u S=%u H=%u paths %u: goodput %.2f Gbit/s, completion %.3f ms, queue delay p99 %.2f us, "
              "trimmed %llu, events %llu, wall %.2f s\n",
              cli.cfg.cc.c_str(), pattern_name(cli.cfg.pattern), cli.cfg.leaves, cli.cfg.spines,
              cli.cfg.hosts_per_leaf, cli.cfg.paths, r.goodput_gbps, r.completion_ms, r.queue_delay_us.p99,
              static_cast<unsigned long long>(r.trimmed), static_cast<unsigned long long>(r.events), r.wall_seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace grex::ccsim;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind("--topology", 0) == 0) return fabric_main(argc, argv);
  Cli cli;
  std::string error;
  if (!parse_args(argc, argv, &cli, &error)) {
    std::fprintf(stderr, "grex-ccsim: %s\n%s", error.c_str(), usage().c_str());
    return 2;
  }
  if (cli.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  Result r;
  if (!run(cli.cfg, &r, &error)) {
    std::fprintf(stderr, "grex-ccsim: %s\n", error.c_str());
    return 2;
  }
  const std::string json = to_json(cli.cfg, r);
  if (cli.json_path.empty()) {
    std::fputs(json.c_str(), stdout);
  } else {
    if (!write_file(cli.json_path, json)) return 1;
    // The JSON went to a file: a one-line summary here.
    const Metrics& w = r.window;
    std::printf(
        "%s N=%u %s: goodput %.4f, jain %.4f, queue delay p50 %.2f p99 %.2f max %.2f us, rtt p99 %.2f us, "
        "drops %llu, pfc %.3f, probes %.4f, cnps %llu, events %llu, wall %.2f s\n",
        cli.cfg.cc.c_str(), cli.cfg.flows, scenario_name(cli.cfg.scenario), w.goodput, w.jain, w.queue_delay_us.p50,
        w.queue_delay_us.p99, w.queue_delay_us.max, w.rtt_us.p99, static_cast<unsigned long long>(w.drops),
        w.pfc_pause_fraction, w.probe_overhead, static_cast<unsigned long long>(w.cnps),
        static_cast<unsigned long long>(r.events), r.wall_seconds);
  }
  if (!cli.csv_path.empty() && !write_file(cli.csv_path, to_csv(r))) return 1;
  return r.buffer_overflows == 0 ? 0 : 3;
}
