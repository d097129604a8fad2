// SPDX-License-Identifier: Apache-2.0
// The --json environment block, the --plot PNG and the progress line.
#include "perf_report.h"

#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grex/probe.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>

#include "perf_clock.h"

namespace grex::perf {
namespace {

constexpr uint64_t kQuietNs = 3'000'000'000;       // no progress line for sweeps shorter than this
constexpr uint64_t kLogEveryNs = 10'000'000'000;   // without a terminal: one line per this long
constexpr uint64_t kTtyEveryNs = 250'000'000;      // on a terminal: redraw at most this often
constexpr int kGnuplotMissing = 127;               // the shell's "command not found"

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      return colon == std::string::npos ? "" : line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "";
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// gnuplot string literal: single quotes, a quote doubled.
std::string gp_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Json common_environment(const PerfArgs& a, const Capabilities& caps, int nranks) {
  utsname u{};
  ::uname(&u);
  std::string drivers;
  const BuildInfo build = build_info();
  for (const auto& d : build.drivers) drivers += (drivers.empty() ? "" : ",") + d;
  const std::string cc = effective_cc(a);
  Json env = {
      {"grex_version", build.version},
      {"dpdk_version", build.dpdk_version},
      {"libibverbs_version", build.ibverbs_version},
      {"drivers_built", drivers},
      {"kernel", std::string(u.sysname) + " " + u.release + " " + u.machine},
      {"cpu", cpu_model()},
      {"cpus_online", static_cast<int64_t>(::sysconf(_SC_NPROCESSORS_ONLN))},
      {"time_utc", utc_now()},
      {"command", a.command_line},
      {"ranks", int64_t{nranks}},
      {"backend", caps.driver},
      {"device", caps.device_name},
      {"link_speed_mbps", static_cast<int64_t>(caps.link_speed_mbps)},
      {"mtu_bytes", static_cast<int64_t>(caps.mtu_bytes)},
      {"queue_depth", static_cast<int64_t>(caps.queue_depth)},
      {"max_message_bytes", static_cast<int64_t>(caps.max_message_bytes)},
      {"buffers", std::string(a.shared_buffers ? "alloc" : "malloc")},
      {"cc", cc.empty() ? std::string("none") : cc},
      {"iterations", int64_t{a.effective_iters()}},
      {"warmup_iterations", int64_t{a.effective_warmup()}},
      {"duration_s", a.duration_s},
  };
  return env;
}

std::string plot_script(const PlotData& plot, const std::string& png_path) {
  std::string s = "set terminal pngcairo size 960,600 enhanced font ',11'\n";
  s += "set output " + gp_quote(png_path) + "\n";
  s += "set title " + gp_quote(plot.title) + " noenhanced\n";
  s += "set logscale x 2\nset format x '%.0b%B'\nset xlabel 'message size (bytes)'\n";
  s += "set ylabel " + gp_quote(plot.y_label) + " noenhanced\nset grid\nset key top left\nset yrange [0:*]\n";
  s += "$data << EOD\n";
  for (const auto& p : plot.points) {
    s += std::to_string(p.bytes);
    for (double y : p.y) s += " " + std::to_string(y);
    s += "\n";
  }
  s += "EOD\nplot ";
  for (size_t i = 0; i < plot.series.size(); ++i)
    s += (i == 0 ? "" : ", ") + std::string("$data using 1:") + std::to_string(i + 2) + " with linespoints lw 2 title " +
         gp_quote(plot.series[i]) + " noenhanced";
  return s + "\n";
}

Result<void> write_plot(const std::string& png_path, const PlotData& plot) {
  if (plot.points.empty()) return Error(Errc::kInvalidArgument, "grex-perf --plot: no rows to plot");
  std::FILE* gp = ::popen("gnuplot 2>&1", "w");
  if (gp == nullptr) return Error::from_errno("grex-perf --plot: cannot start gnuplot", errno);
  std::string script = plot_script(plot, png_path);
  std::fwrite(script.data(), 1, script.size(), gp);
  int status = ::pclose(gp);
  if (WIFEXITED(status) && WEXITSTATUS(status) == kGnuplotMissing)
    return Error(Errc::kNotFound, "grex-perf --plot needs gnuplot, which is not installed")
        .hint("apt-get install gnuplot-nox; the numbers are in the table (and --json)");
  if (status != 0 || ::access(png_path.c_str(), F_OK) != 0)
    return Error(Errc::kSystem, "grex-perf --plot: gnuplot could not write '" + png_path + "'");
  return ok();
}

Progress::Progress(bool enabled, size_t steps)
    : enabled_(enabled), tty_(::isatty(STDERR_FILENO) == 1), steps_(steps), start_ns_(now_ns()) {
  // GREX_PERF_PROGRESS_MS moves the quiet time (0: from the first step; tests use it).
  const char* v = std::getenv("GREX_PERF_PROGRESS_MS");
  quiet_ns_ = v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) * 1'000'000 : kQuietNs;
}

void Progress::step(size_t done, const std::string& what) {
  if (!enabled_ || done >= steps_) return;
  uint64_t now = now_ns();
  if (now - start_ns_ < quiet_ns_ || (printed_ && now - last_print_ns_ < (tty_ ? kTtyEveryNs : kLogEveryNs))) return;
  last_print_ns_ = now;
  std::fprintf(stderr, "%s# progress: %zu/%zu steps done (last %s), %.0f s%s", tty_ ? "\r" : "", done, steps_,
               what.c_str(), static_cast<double>(now - start_ns_) / 1e9, tty_ ? "   " : "\n");
  std::fflush(stderr);
  printed_ = true;
}

void Progress::done() {
  if (enabled_ && tty_ && printed_) std::fputs("\n", stderr);
  printed_ = false;
}

}  // namespace grex::perf
