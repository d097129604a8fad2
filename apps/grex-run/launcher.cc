// SPDX-License-Identifier: Apache-2.0
// Launcher: spawning the ranks, the poll(2) loop over their pipes and the signalfd, and shutdown.
#include "launcher.h"

#include <grex/log.h>

#include "output.h"
#include "spawn.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <unordered_set>

namespace grex::run {
namespace {

using Clock = std::chrono::steady_clock;

// Exit code when a rank cannot even be forked (fork/pipe failed).
constexpr int kExitLaunchFailed = 1;

/// Prints one "grex-run: ..." line on stderr with a single write(2).
void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0) return;
  std::string line = "grex-run: ";
  line.append(buf, std::min(static_cast<size_t>(n), sizeof(buf) - 1));
  line += '\n';
  (void)write_all(STDERR_FILENO, line);
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

struct RankProc {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  std::vector<TaggedStream> streams;  // stdout, stderr; empty with --no-tag-output
};

enum class Phase {
  kRunning,   // all is well
  kStopping,  // a signal went to every rank; SIGKILL at kill_at_
  kKilled,    // SIGKILL sent; waiting for the reaps
};

/// One launch: the ranks, the poll loop and the shutdown state machine.
class Job {
 public:
  Job(const LaunchOptions& opts, int signal_fd, const sigset_t& child_mask,
      const struct sigaction& child_sigpipe)
      : opts_(opts), signal_fd_(signal_fd), child_mask_(child_mask),
        child_sigpipe_(child_sigpipe) {}
  ~Job() {
    if (dev_null_ >= 0) ::close(dev_null_);
  }

  int run() {
    start_ = Clock::now();
    spawn_all();
    while (running_count() > 0) poll_once();
    // Every rank is gone; forward what is left in the pipes without waiting
    // for grandchildren that may still hold them open.
    for (RankProc& r : ranks_)
      for (TaggedStream& s : r.streams) {
        s.drain();
        s.finish();
      }
    return exit_code_;
  }

 private:
  void spawn_all();
  bool spawn_rank(int rank, const std::string& path);  // false: stop launching
  void poll_once();
  void on_signal_fd();
  void reap();
  void on_exit(RankProc& r, int status);
  void stop(int exit_code, int sig);
  void signal_groups(int sig);  // to every rank's process group
  void check_deadlines();
  int poll_timeout_ms() const;
  std::vector<int> running_ranks() const;
  int running_count() const { return static_cast<int>(running_ranks().size()); }

  const LaunchOptions& opts_;
  int signal_fd_;
  const sigset_t& child_mask_;
  const struct sigaction& child_sigpipe_;
  int dev_null_ = -1;
  std::vector<RankProc> ranks_;
  Phase phase_ = Phase::kRunning;
  int exit_code_ = 0;
  Clock::time_point start_;
  Clock::time_point kill_at_;
};

void Job::spawn_all() {
  if (opts_.argv.empty() || opts_.nprocs < 1) {
    say("nothing to launch");
    exit_code_ = kExitUsage;
    return;
  }
  Result<std::string> path = find_program(opts_.argv.front());
  if (!path.ok()) {
    say("%s", path.error().cause().c_str());
    exit_code_ = kExitCannotExec;
    return;
  }
  dev_null_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ranks_.resize(static_cast<size_t>(opts_.nprocs));
  for (int rank = 0; rank < opts_.nprocs; ++rank)
    if (!spawn_rank(rank, *path)) return;
}

bool Job::spawn_rank(int rank, const std::string& path) {
  RankProc& r = ranks_[static_cast<size_t>(rank)];
  r.rank = rank;
  std::vector<std::string> overrides = opts_.job_env;
  for (std::string& kv : rank_env(rank, opts_.nprocs)) overrides.push_back(std::move(kv));

  SpawnSpec spec;
  spec.path = path;
  spec.argv = opts_.argv;
  spec.env = merge_env(environ, overrides);
  // Ranks run in background process groups: one reading a terminal would
  // stop on SIGTTIN. Rank 0 keeps a piped stdin (like mpirun); others read /dev/null.
  if (rank > 0 || ::isatty(STDIN_FILENO)) spec.stdin_fd = dev_null_;
  spec.child_mask = &child_mask_;
  spec.child_sigpipe = &child_sigpipe_;

  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  if (opts_.tag_output) {
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      int e = errno;
      say("rank %d: pipe2: %s%s", rank, std::strerror(e),
          e == EMFILE ? "; hint: each rank needs about 3 fds, raise ulimit -n" : "");
      for (int fd : {out[0], out[1], err[0], err[1]})
        if (fd >= 0) ::close(fd);
      stop(kExitLaunchFailed, SIGTERM);
      return false;
    }
    spec.stdout_fd = out[1];
    spec.stderr_fd = err[1];
    std::string prefix = "[";  // built piecewise: g++ 12 -Wrestrict misfires on "[" + s
    prefix += std::to_string(rank);
    prefix += "] ";
    r.streams.reserve(2);
    r.streams.emplace_back(out[0], STDOUT_FILENO, prefix);
    r.streams.emplace_back(err[0], STDERR_FILENO, prefix);
  }
  int exec_errno = 0;
  Result<pid_t> pid = spawn(spec, &exec_errno);
  for (int fd : {out[1], err[1]})  // the child holds the write ends now
    if (fd >= 0) ::close(fd);
  if (!pid.ok()) {
    for (TaggedStream& s : r.streams) s.finish();
    if (exec_errno != 0) {
      say("%s", pid.error().cause().c_str());
      stop(kExitCannotExec, SIGTERM);
    } else {
      say("rank %d: %s", rank, pid.error().message().c_str());
      stop(kExitLaunchFailed, SIGTERM);
    }
    return false;
  }
  r.pid = *pid;
  r.running = true;
  if (log_enabled(LogLevel::kInfo))
    log_line(LogLevel::kInfo, "grex-run", "rank " + std::to_string(rank) + " started as pid " + std::to_string(r.pid));
  return true;
}

void Job::poll_once() {
  std::vector<pollfd> fds;
  std::vector<TaggedStream*> owners;  // owners[i] reads fds[i + 1]
  fds.push_back({signal_fd_, POLLIN, 0});
  for (RankProc& r : ranks_)
    for (TaggedStream& s : r.streams)
      if (s.fd() >= 0) {
        fds.push_back({s.fd(), POLLIN, 0});
        owners.push_back(&s);
      }
  int n = ::poll(fds.data(), fds.size(), poll_timeout_ms());
  if (n < 0 && errno != EINTR) {
    say("poll: %s; killing the ranks", std::strerror(errno));
    stop(kExitLaunchFailed, SIGKILL);
    ::usleep(10'000);  // no wakeups to wait for: look for the reaps now and then
    on_signal_fd();
  }
  if (n > 0) {
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0) owners[i - 1]->drain();
    if (fds[0].revents != 0) on_signal_fd();
  }
  check_deadlines();
}

void Job::on_signal_fd() {
  signalfd_siginfo info;
  bool child_exited = false;
  while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      child_exited = true;
      continue;
    }
    std::string ranks = format_ranks(running_ranks());
    if (phase_ == Phase::kRunning) {
      say("received %s; forwarding it to ranks %s", signal_name(sig).c_str(), ranks.c_str());
      stop(kExitSignalBase + sig, sig);
    } else if (phase_ == Phase::kStopping) {
      say("received %s again; sending SIGKILL to ranks %s", signal_name(sig).c_str(),
          ranks.c_str());
      signal_groups(SIGKILL);
      phase_ = Phase::kKilled;
    }
  }
  if (child_exited) reap();
}

void Job::reap() {
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    for (RankProc& r : ranks_)
      if (r.pid == pid && r.running) on_exit(r, status);
  }
}

void Job::on_exit(RankProc& r, int status) {
  r.running = false;
  for (TaggedStream& s : r.streams) s.drain();  // its last lines come before our verdict
  bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  if (phase_ != Phase::kRunning || !failed) {
    if (log_enabled(LogLevel::kInfo)) {
      char line[96];
      std::snprintf(line, sizeof line, "rank %d (pid %d) exited, status 0x%x", r.rank, static_cast<int>(r.pid),
                    static_cast<unsigned>(status));
      log_line(LogLevel::kInfo, "grex-run", line);
    }
    return;
  }
  if (WIFEXITED(status)) {
    say("rank %d exited with code %d", r.rank, WEXITSTATUS(status));
    stop(WEXITSTATUS(status), SIGTERM);
    return;
  }
  int sig = WTERMSIG(status);
  say("rank %d killed by signal %d (%s%s)", r.rank, sig, signal_name(sig).c_str(),
      WCOREDUMP(status) ? ", core dumped" : "");
  stop(kExitSignalBase + sig, SIGTERM);
}

void Job::stop(int exit_code, int sig) {
  if (phase_ != Phase::kRunning) return;
  exit_code_ = exit_code;
  phase_ = Phase::kStopping;
  auto grace = std::chrono::duration<double>(opts_.kill_grace_s);
  kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(grace);
  signal_groups(sig);
  if (opts_.kill_grace_s <= 0 && sig != SIGKILL) signal_groups(SIGKILL);
  if (opts_.kill_grace_s <= 0 || sig == SIGKILL) phase_ = Phase::kKilled;
}

void Job::signal_groups(int sig) {
  for (const RankProc& r : ranks_) {
    if (r.pid < 0) continue;
    // The whole group, so grandchildren go too, even those a rank that
    // already exited left behind. A group ID is not reused while the group
    // has members. A running rank that moved to a group of its own gets the
    // signal by pid.
    if (::kill(-r.pid, sig) != 0 && r.running) ::kill(r.pid, sig);
  }
}

void Job::check_deadlines() {
  Clock::time_point now = Clock::now();
  if (phase_ == Phase::kRunning && opts_.timeout_s > 0 &&
      now - start_ >= std::chrono::duration<double>(opts_.timeout_s)) {
    say("job timed out after %g s (--timeout); ranks still running: %s", opts_.timeout_s,
        format_ranks(running_ranks()).c_str());
    stop(kExitTimeout, SIGTERM);
  } else if (phase_ == Phase::kStopping && now >= kill_at_) {
    say("ranks %s still running %g s after being told to stop; sending SIGKILL",
        format_ranks(running_ranks()).c_str(), opts_.kill_grace_s);
    signal_groups(SIGKILL);
    phase_ = Phase::kKilled;
  }
}

int Job::poll_timeout_ms() const {
  Clock::time_point deadline;
  if (phase_ == Phase::kRunning && opts_.timeout_s > 0) {
    deadline = start_ + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(opts_.timeout_s));
  } else if (phase_ == Phase::kStopping) {
    deadline = kill_at_;
  } else {
    return -1;
  }
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Round up so we never wake just before the deadline and spin.
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
}

std::vector<int> Job::running_ranks() const {
  std::vector<int> out;
  for (const RankProc& r : ranks_)
    if (r.running) out.push_back(r.rank);
  return out;
}

}  // namespace

Result<std::unique_ptr<Launcher>> Launcher::create() {
  std::unique_ptr<Launcher> launcher(new Launcher());
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  int rc = ::pthread_sigmask(SIG_BLOCK, &set, &launcher->old_mask_);
  if (rc != 0) return Error::from_errno("grex-run: pthread_sigmask", rc);
  launcher->signal_fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (launcher->signal_fd_ < 0) return Error::from_errno("grex-run: signalfd", errno);
  // A closed stdout must not kill us mid-shutdown; ranks get the old disposition back.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &launcher->old_sigpipe_);
  return launcher;
}

Launcher::~Launcher() {
  if (signal_fd_ >= 0) ::close(signal_fd_);
  ::sigaction(SIGPIPE, &old_sigpipe_, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

int Launcher::run(const LaunchOptions& opts) {
  Job job(opts, signal_fd_, old_mask_, old_sigpipe_);
  return job.run();
}

std::vector<std::string> rank_env(int rank, int nprocs) {
  std::string r = std::to_string(rank);
  std::string n = std::to_string(nprocs);
  return {"GREX_RANK=" + r,       "GREX_WORLD_SIZE=" + n, "GREX_LOCAL_RANK=" + r,
          "GREX_LOCAL_SIZE=" + n, "RANK=" + r,            "WORLD_SIZE=" + n,
          "LOCAL_RANK=" + r,      "LOCAL_WORLD_SIZE=" + n};
}

std::vector<std::string> merge_env(char* const* environ_in,
                                   const std::vector<std::string>& overrides) {
  auto key_of = [](std::string_view kv) { return kv.substr(0, kv.find('=')); };
  std::unordered_set<std::string_view> keys;
  for (const std::string& kv : overrides) keys.insert(key_of(kv));
  std::vector<std::string> out;
  for (char* const* e = environ_in; e != nullptr && *e != nullptr; ++e)
    if (!keys.contains(key_of(*e))) out.emplace_back(*e);
  out.insert(out.end(), overrides.begin(), overrides.end());
  return out;
}

std::string format_ranks(const std::vector<int>& ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(sorted[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(sorted[j]);
    }
    i = j + 1;
  }
  return out.empty() ? "(none)" : out;
}

}  // namespace grex::run
