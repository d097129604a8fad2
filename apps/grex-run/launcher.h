// SPDX-License-Identifier: Apache-2.0
// Launcher: starts the ranks of a one-host job, forwards their output and supervises them.
#pragma once

#include <grex/result.h>

#include <csignal>
#include <memory>
#include <string>
#include <vector>

namespace grex::run {

/// Exit codes of grex-run besides a failing rank's own code.
constexpr int kExitUsage = 2;          ///< bad command line
constexpr int kExitTimeout = 124;      ///< --timeout expired (like timeout(1))
constexpr int kExitCannotExec = 127;   ///< program not found or not executable
constexpr int kExitSignalBase = 128;   ///< + signal number, as shells report it

/// What to run and how to supervise it.
struct LaunchOptions {
  int nprocs = 0;                  ///< ranks to start, all on this host
  std::vector<std::string> argv;   ///< program and its arguments; argv[0] is looked up in PATH
  /// "KEY=VALUE" set for every rank, on top of grex-run's own environment
  /// (store address, token, job id, backend). Rank variables are added by run().
  std::vector<std::string> job_env;
  double timeout_s = 0;            ///< wall-clock limit for the job; 0: none
  double kill_grace_s = 5;         ///< SIGTERM -> SIGKILL delay on shutdown
  bool tag_output = true;          ///< "[R] " prefixes through pipes; false: ranks inherit fds
};

/// A job in progress. Create it before any thread starts (the store server's
/// included): create() blocks SIGCHLD, SIGINT, SIGTERM and SIGHUP in the
/// calling thread so every later thread inherits the mask, and reads them
/// from a signalfd instead. Ranks get the original mask back before exec.
class Launcher {
 public:
  /// Blocks the job signals and opens the signalfd. Errors: kSystem.
  static Result<std::unique_ptr<Launcher>> create();
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  /// Starts opts.nprocs ranks (each in its own process group), forwards
  /// their output and waits for all of them. The first rank to fail (non-zero
  /// exit, signal) or an expired timeout or a SIGINT/SIGTERM/SIGHUP to
  /// grex-run stops the rest: the signal (SIGTERM for a failure) goes to
  /// every rank's process group (also those of ranks that already exited, for
  /// the processes they left behind), SIGKILL follows after kill_grace_s if
  /// a rank is still running.
  /// Blocks until every rank is reaped; returns grex-run's exit code: 0, the
  /// failing rank's code (128 + signal if killed), kExitTimeout,
  /// kExitCannotExec or 128 + the signal grex-run received. Reports every
  /// failure on stderr as one "grex-run: ..." line.
  int run(const LaunchOptions& opts);

 private:
  Launcher() = default;

  int signal_fd_ = -1;
  sigset_t old_mask_{};
  struct sigaction old_sigpipe_ {};
};

/// "KEY=VALUE" entries a rank gets from grex-run: GREX_RANK, GREX_WORLD_SIZE,
/// GREX_LOCAL_RANK, GREX_LOCAL_SIZE and torchrun's RANK, WORLD_SIZE,
/// LOCAL_RANK, LOCAL_WORLD_SIZE.
std::vector<std::string> rank_env(int rank, int nprocs);

/// environ without the keys set in `overrides`, followed by `overrides`.
std::vector<std::string> merge_env(char* const* environ_in,
                                   const std::vector<std::string>& overrides);

/// Ranks as a compact list: {0,1,2,3,5} -> "0-3, 5".
std::string format_ranks(const std::vector<int>& ranks);

}  // namespace grex::run
