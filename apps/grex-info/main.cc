// SPDX-License-Identifier: Apache-2.0
// grex-info: the devices each grex backend would use on this host, and what
// they can do. Exits 1 when no backend can reach another host (or, with
// --backend, when that backend has nothing usable).
#include <grex/probe.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "info.h"

namespace grex::info {
namespace {

constexpr int kExitNothingUsable = 1;
constexpr int kExitUsage = 2;

constexpr const char* kUsage =
    "Usage: grex-info [--backend shm|dpdk|verbs|cuda] [--json FILE|-]\n"
    "Lists what each grex backend finds on this host: RDMA devices and ports (state, MTU,\n"
    "speed, GIDs, completion timestamps, dma-buf), DPDK's hugepages, NICs and kernel\n"
    "interfaces (hardware timestamps), shared memory, and CUDA devices (dma-buf, GPUDirect\n"
    "RDMA, nvidia_peermem).\n"
    "  --backend NAME   only this backend; exit 1 when it has nothing usable\n"
    "  --json FILE      also write the findings as JSON to FILE ('-': stdout, instead of text)\n"
    "Exit status: 0 when a backend that reaches other hosts (verbs, dpdk) is usable, or the\n"
    "one named by --backend is; 1 otherwise, with the reason; 2 for usage errors.\n";

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "grex-info: %s\n%s", msg.c_str(), kUsage);
  return kExitUsage;
}

int print_usage() {
  std::fputs(kUsage, stdout);
  return 0;
}

int run(int argc, char** argv) {
  std::string only, json_path;
  CLI::App app("grex-info");
  app.set_help_flag();  // kUsage is the help
  app.allow_extras();   // reported below, in this tool's words
  CLI::Option* help = app.add_flag("-h,--help");
  CLI::Option* backend = app.add_option("--backend", only)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CLI::Option* json = app.add_option("--json", json_path)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (help->count() > 0) return print_usage();
    for (const CLI::Option* o : {backend, json})  // CLI11 starts the message with the option's name
      if (std::string_view(e.what()).starts_with(o->get_name() + ":")) return usage_error(o->get_name() + " needs a value");
    return usage_error(e.what());
  }
  if (help->count() > 0) return print_usage();
  if (!app.remaining().empty()) return usage_error("unknown argument '" + app.remaining().front() + "'");
  if (backend->count() > 0 && only != "shm" && only != "dpdk" && only != "verbs" && only != "cuda")
    return usage_error("unknown backend '" + only + "'");
  std::vector<Section> sections;
  if (only.empty() || only == "shm") sections.push_back(probe_shm());
  if (only.empty() || only == "verbs") sections.push_back(probe_verbs());
  if (only.empty() || only == "dpdk") sections.push_back(probe_dpdk());
  if (only.empty() || only == "cuda") sections.push_back(probe_cuda());

  bool ok = false;
  for (const Section& s : sections) ok |= s.usable && (!only.empty() || s.networking);
  const BuildInfo build = build_info();
  std::string drivers;
  for (const auto& d : build.drivers) drivers += (drivers.empty() ? "" : ", ") + d;

  if (json_path != "-") {
    std::printf("grex-info %s (drivers built: %s)\n", build.version.c_str(), drivers.c_str());
    for (const Section& s : sections) {
      std::printf("\n%s: %s%s\n", s.name.c_str(), s.usable ? "" : "not usable: ", s.summary.c_str());
      for (const auto& line : s.lines) std::printf("  %s\n", line.c_str());
    }
  }
  if (!json_path.empty()) {
    Json doc{{"grex_version", build.version}, {"drivers_built", drivers}};
    for (const Section& s : sections) {
      Json sec{{"usable", s.usable}, {"summary", s.summary}};  // the summary goes second
      sec.update(s.json);
      doc[s.name] = std::move(sec);
    }
    doc["usable"] = ok;
    std::string text = doc.dump(2) + "\n";
    if (json_path == "-") {
      std::fputs(text.c_str(), stdout);
    } else if (std::FILE* f = std::fopen(json_path.c_str(), "w")) {
      std::fputs(text.c_str(), f);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "grex-info: cannot write '%s': %s\n", json_path.c_str(), std::strerror(errno));
      return kExitNothingUsable;
    }
  }
  if (!ok) {
    if (only.empty())
      std::fprintf(stderr,
                   "grex-info: no backend that reaches other hosts is usable here (no active RDMA port, no DPDK "
                   "port); ranks of one host can still use shm\n");
    else
      std::fprintf(stderr, "grex-info: %s has nothing usable: %s\n", only.c_str(),
                   sections.front().summary.c_str());
    return kExitNothingUsable;
  }
  return 0;
}

}  // namespace
}  // namespace grex::info

int main(int argc, char** argv) { return grex::info::run(argc, argv); }
