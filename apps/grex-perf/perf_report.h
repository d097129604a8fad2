// SPDX-License-Identifier: Apache-2.0
// What grex-perf reports besides its tables: the environment block of --json,
// the --plot PNG (drawn by gnuplot) and the progress line of long sweeps.
#pragma once

#include <grex/result.h>
#include <grex/transport.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "perf_args.h"
#include "perf_format.h"

namespace grex::perf {

/// The "environment" object of --json: grex, DPDK and libibverbs (rdma-core) versions, the
/// kernel, the time, the command line, the backend and its device capabilities.
Json common_environment(const PerfArgs& a, const Capabilities& caps, int nranks);

/// A plot of one or more series against message size (log2 x axis).
struct PlotData {
  std::string title;
  std::string y_label;               ///< the unit: "GB/s", "usec"
  std::vector<std::string> series;   ///< legend names, one per y value of a point
  struct Point {
    size_t bytes = 0;
    std::vector<double> y;
  };
  std::vector<Point> points;
};

/// The gnuplot script that draws `plot` into `png_path` (data inline).
std::string plot_script(const PlotData& plot, const std::string& png_path);
/// Runs gnuplot on plot_script(). Errors: kNotFound when gnuplot is missing
/// (naming the Debian package), kSystem when it fails.
Result<void> write_plot(const std::string& png_path, const PlotData& plot);

/// "# progress: step 7/23 (65536 B), 12 s" on stderr for sweeps that run longer
/// than a few seconds: rewritten in place on a terminal, every few seconds
/// otherwise. Silent when `enabled` is false (ranks that do not print).
class Progress {
 public:
  Progress(bool enabled, size_t steps);
  /// `done` steps of the total are finished; `what` names the last one.
  void step(size_t done, const std::string& what);
  /// Ends the line (on a terminal) once the sweep is over.
  void done();

 private:
  bool enabled_;
  bool tty_;
  size_t steps_;
  uint64_t start_ns_;
  uint64_t quiet_ns_;
  uint64_t last_print_ns_ = 0;
  bool printed_ = false;
};

}  // namespace grex::perf
