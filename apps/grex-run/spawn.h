// SPDX-License-Identifier: Apache-2.0
// spawn(): fork + exec of one rank in its own process group, with exec failures reported back.
#pragma once

#include <grex/result.h>

#include <csignal>
#include <string>
#include <sys/types.h>
#include <vector>

namespace grex::run {

/// How to start one child process.
struct SpawnSpec {
  std::string path;                ///< executable to run (see find_program)
  std::vector<std::string> argv;   ///< argv[0] as the user wrote it, then the arguments
  std::vector<std::string> env;    ///< complete environment, "KEY=VALUE"
  int stdin_fd = -1;               ///< dup'ed onto fd 0; -1: inherit
  int stdout_fd = -1;              ///< dup'ed onto fd 1; -1: inherit
  int stderr_fd = -1;              ///< dup'ed onto fd 2; -1: inherit
  const sigset_t* child_mask = nullptr;              ///< signal mask to exec with
  const struct sigaction* child_sigpipe = nullptr;   ///< SIGPIPE disposition to exec with
};

/// Looks `name` up like execvp does: as is when it contains '/', else in
/// each $PATH directory. Errors (message "cannot execute 'name': <reason>"):
/// kNotFound when no such file exists, kSystem (EACCES) when only
/// non-executable files do.
Result<std::string> find_program(const std::string& name);

/// Forks, puts the child in a new process group (pgid = its pid, set by both
/// sides so it holds when this returns), wires its fds and execs it. The
/// child gets SIGTERM if the calling thread dies (PR_SET_PDEATHSIG). Marks
/// every inherited fd above 2 close-on-exec first, so sockets other threads
/// opened without O_CLOEXEC do not leak into the child. Returns the pid once
/// the exec succeeded. An exec failure travels back through a CLOEXEC pipe:
/// the child is reaped, *exec_errno gets its errno (0 on every other path)
/// and the error says "cannot execute 'prog': <strerror>" (kNotFound for
/// ENOENT). pipe/fork failures: kSystem or kNoMemory. Blocks only until the
/// exec happened. Safe with other threads running: the child calls only
/// async-signal-safe functions.
Result<pid_t> spawn(const SpawnSpec& spec, int* exec_errno);

}  // namespace grex::run
