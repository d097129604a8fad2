// SPDX-License-Identifier: Apache-2.0
// grex-run's job files and --status (jobfile.h).
#include "jobfile.h"

#include <grex/bootstrap.h>
#include <grex/status.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace grex::run {
namespace {

// $XDG_RUNTIME_DIR/grex where that is set, else a folder of this user's in /tmp.
std::string job_dir() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && *xdg == '/') return std::string(xdg) + "/grex";
  return "/tmp/grex-" + std::to_string(::getuid());
}

// The folder exists, is a real folder of this user and open to nobody else.
Result<void> check_dir(const std::string& dir, bool create) {
  if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Error::from_errno("grex-run: cannot create " + dir, errno);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Error::from_errno("grex-run: " + dir, errno);
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 077) != 0)
    return Error(Errc::kAuthFailed, "grex-run: " + dir + " is not a folder of this user's alone (owner uid " +
                                              std::to_string(st.st_uid) + ", mode " + std::to_string(st.st_mode & 0777) +
                                              "): job files are not written or read there");
  return ok();
}

struct Job {
  int pid = 0;
  std::string addr, token;
};

std::vector<Job> running_jobs() {
  std::vector<Job> jobs;
  const std::string dir = job_dir();
  if (!check_dir(dir, false).ok()) return jobs;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return jobs;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!name.ends_with(".job")) continue;
    Job j;
    auto [end, ec] = std::from_chars(name.data(), name.data() + name.size() - 4, j.pid);
    if (ec != std::errc() || end != name.data() + name.size() - 4 || j.pid <= 0) continue;
    if (::kill(j.pid, 0) != 0 && errno == ESRCH) {  // its grex-run is gone: a stale file
      (void)::unlink((dir + "/" + name).c_str());
      continue;
    }
    std::ifstream in(dir + "/" + name);
    if (!std::getline(in, j.addr) || !std::getline(in, j.token)) continue;
    jobs.push_back(j);
  }
  ::closedir(d);
  return jobs;
}

}  // namespace

Result<std::string> publish_job(const std::string& store_addr, const std::string& token) {
  const std::string dir = job_dir();
  GREX_TRY(check_dir(dir, true));
  (void)running_jobs();  // sweeps the files of grex-runs that were killed outright
  const std::string path = dir + "/" + std::to_string(::getpid()) + ".job";
  (void)::unlink(path.c_str());  // a file left by an earlier process with this pid
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Error::from_errno("grex-run: cannot write " + path, errno);
  const std::string body = store_addr + "\n" + token + "\n";
  const bool whole = ::write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
  ::close(fd);
  if (!whole) {
    (void)::unlink(path.c_str());
    return Error(Errc::kSystem, "grex-run: short write to " + path);
  }
  return path;
}

int print_status(const std::vector<std::string>& args, bool json, int64_t timeout_ms) {
  if (args.size() > 1) {
    std::fprintf(stderr, "grex-run: --status takes at most one PID (of the grex-run that leads the job)\n");
    return 2;
  }
  int want = 0;
  if (args.size() == 1) {
    auto [end, ec] = std::from_chars(args[0].data(), args[0].data() + args[0].size(), want);
    if (ec != std::errc() || end != args[0].data() + args[0].size() || want <= 0) {
      std::fprintf(stderr, "grex-run: --status needs a PID, got '%s'\n", args[0].c_str());
      return 2;
    }
  }
  std::vector<Job> jobs = running_jobs();
  if (want > 0) std::erase_if(jobs, [&](const Job& j) { return j.pid != want; });
  if (jobs.empty()) {
    std::fprintf(stderr, "grex-run: %s\n", want > 0 ? ("no grex-run job of this user has pid " + args[0]).c_str()
                                                   : "no grex-run job of this user is running");
    return 1;
  }
  if (jobs.size() > 1) {
    std::fprintf(stderr, "grex-run: %zu jobs are running; name one: grex-run --status PID\n", jobs.size());
    for (const Job& j : jobs) std::fprintf(stderr, "  %d (store %s)\n", j.pid, j.addr.c_str());
    return 2;
  }
  const Job& j = jobs.front();
  const size_t colon = j.addr.rfind(':');
  auto store = TcpStore::connect(j.addr.substr(0, colon), static_cast<uint16_t>(std::atoi(j.addr.c_str() + colon + 1)),
                                 j.token, timeout_ms);
  if (!store.ok()) {
    std::fprintf(stderr, "grex-run: %s\n", store.error().message().c_str());
    return 1;
  }
  auto status = query_job_status(**store, timeout_ms);
  if (!status.ok()) {
    std::fprintf(stderr, "grex-run: job %d: %s\n", j.pid, status.error().message().c_str());
    return 1;
  }
  if (!json) std::printf("job of grex-run %d (store %s)\n", j.pid, j.addr.c_str());
  std::fputs(json ? job_status_json(*status).c_str() : format_job_status(*status).c_str(), stdout);
  for (const CommStatus& c : *status)
    if (!c.silent.empty()) return 3;
  return 0;
}

}  // namespace grex::run
