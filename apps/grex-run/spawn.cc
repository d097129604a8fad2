// SPDX-License-Identifier: Apache-2.0
// spawn() and find_program(): starting one rank process and reporting why it could not start.
#include "spawn.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <string_view>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace grex::run {
namespace {

// glibc's execvp() uses this when PATH is unset.
constexpr const char* kDefaultPath = "/bin:/usr/bin";

Error exec_error(const std::string& name, int err) {
  std::string cause = "cannot execute '" + name + "': " + std::strerror(err);
  return Error(err == ENOENT ? Errc::kNotFound : Errc::kSystem, std::move(cause));
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Runs in the forked child: only async-signal-safe calls until execve.
[[noreturn]] void exec_child(const SpawnSpec& spec, char* const* argv, char* const* envp,
                             int error_fd, pid_t parent) {
  ::setpgid(0, 0);
  // If grex-run dies without its shutdown (SIGKILL, crash), the rank is told too.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(127);  // it died before prctl took hold
  if (spec.stdin_fd >= 0) ::dup2(spec.stdin_fd, STDIN_FILENO);
  if (spec.stdout_fd >= 0) ::dup2(spec.stdout_fd, STDOUT_FILENO);
  if (spec.stderr_fd >= 0) ::dup2(spec.stderr_fd, STDERR_FILENO);
  // Older kernels lack CLOSE_RANGE_CLOEXEC; our own fds are O_CLOEXEC anyway.
  (void)::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  if (spec.child_sigpipe != nullptr) ::sigaction(SIGPIPE, spec.child_sigpipe, nullptr);
  if (spec.child_mask != nullptr) ::sigprocmask(SIG_SETMASK, spec.child_mask, nullptr);
  ::execve(spec.path.c_str(), argv, envp);
  int err = errno;
  ssize_t n;
  do {
    n = ::write(error_fd, &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  ::_exit(127);
}

}  // namespace

Result<std::string> find_program(const std::string& name) {
  if (name.empty()) return exec_error(name, ENOENT);
  if (name.find('/') != std::string::npos) return name;
  const char* path_env = std::getenv("PATH");
  std::string_view path = path_env != nullptr ? path_env : kDefaultPath;
  int err = ENOENT;
  while (true) {
    size_t colon = path.find(':');
    std::string dir(path.substr(0, colon));
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      err = EACCES;  // like execvp: remember, keep looking
    }
    if (colon == std::string_view::npos) break;
    path.remove_prefix(colon + 1);
  }
  return exec_error(name, err);
}

Result<pid_t> spawn(const SpawnSpec& spec, int* exec_errno) {
  *exec_errno = 0;
  const std::string& name = spec.argv.empty() ? spec.path : spec.argv[0];
  std::vector<char*> argv = c_strings(spec.argv);
  std::vector<char*> envp = c_strings(spec.env);

  int error_pipe[2];
  if (::pipe2(error_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    Error e = Error::from_errno("pipe2", err);
    if (err == EMFILE) e.hint("out of file descriptors; raise ulimit -n");
    return e;
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(error_pipe[0]);
    ::close(error_pipe[1]);
    return Error::from_errno("fork", err).hint("check ulimit -u and free memory");
  }
  if (pid == 0) exec_child(spec, argv.data(), envp.data(), error_pipe[1], parent);

  ::close(error_pipe[1]);
  ::setpgid(pid, pid);  // fails harmlessly (EACCES) if the child already exec'ed
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(error_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  ::close(error_pipe[0]);
  if (n != static_cast<ssize_t>(sizeof(child_errno))) return pid;  // EOF: exec succeeded

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  *exec_errno = child_errno;
  return exec_error(name, child_errno);
}

}  // namespace grex::run
