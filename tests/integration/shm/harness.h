// SPDX-License-Identifier: Apache-2.0
// Multi-process test harness: runs a function in N forked ranks that rendezvous
// through a real StoreServer hosted by the test process.
#pragma once

#include <grex/bootstrap.h>
#include <grex/communicator.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"

namespace grex::test {

/// What a rank's function sees.
struct Rank {
  int rank;
  int size;
  std::shared_ptr<Bootstrap> bootstrap;
  uint16_t store_port = 0;  ///< the job's store on 127.0.0.1, for a second client (the C API)
  std::string job_token;
};

/// Fails the rank's process with a message naming the file and line.
#define RANK_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: rank check failed: %s\n", __FILE__, __LINE__, #cond);  \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

/// Like RANK_CHECK for a Result: prints its error.
#define RANK_OK(expr)                                                                       \
  do {                                                                                      \
    const auto& rank_ok_r_ = (expr);                                                               \
    if (!rank_ok_r_.ok()) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,             \
                   rank_ok_r_.error().message().c_str());                                   \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

/// This rank's stderr goes into `path` while the object lives (a rank's log, read by its test).
class StderrTo {
 public:
  explicit StderrTo(const std::string& path)
      : saved_(::dup(STDERR_FILENO)), fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644)) {
    if (saved_ >= 0 && fd_ >= 0) ::dup2(fd_, STDERR_FILENO);
  }
  ~StderrTo() {
    if (saved_ >= 0) ::dup2(saved_, STDERR_FILENO);
    if (fd_ >= 0) ::close(fd_);
    if (saved_ >= 0) ::close(saved_);
  }
  bool ok() const { return saved_ >= 0 && fd_ >= 0; }

 private:
  int saved_, fd_;
};

/// Exit status of each rank: 0..255, or 128+signal; -1 if it had to be killed.
struct RunResult {
  std::vector<int> codes;
  bool all_ok() const {
    for (int c : codes)
      if (c != 0) return false;
    return true;
  }
  std::string describe() const {
    std::string s;
    for (size_t i = 0; i < codes.size(); ++i) s += "rank " + std::to_string(i) + "=" + std::to_string(codes[i]) + " ";
    return s;
  }
};

/// The store runs in a process of its own, so the ranks are forked from a
/// single-threaded parent (forking a process with a running server thread can
/// leave a lock held in the child, e.g. inside the sanitizers' allocator).
class StoreProcess {
 public:
  explicit StoreProcess(const std::string& token) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    std::fflush(stdout);
    std::fflush(stderr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      auto server = StoreServer::start("127.0.0.1", 0, token);
      uint16_t port = server ? (*server)->port() : 0;
      if (!server) std::fprintf(stderr, "store server: %s\n", server.error().message().c_str());
      ssize_t w = ::write(fds[1], &port, sizeof(port));
      (void)w;
      ::close(fds[1]);
      for (;;) ::pause();  // until the test kills it
    }
    ::close(fds[1]);
    if (pid_ > 0 && ::read(fds[0], &port_, sizeof(port_)) != sizeof(port_)) port_ = 0;
    ::close(fds[0]);
  }
  ~StoreProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  uint16_t port() const { return port_; }

 private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

/// Forks n ranks running fn; kills them all after timeout_s.
inline RunResult run_ranks(int n, const std::function<int(Rank&)>& fn, int timeout_s = 60) {
  const std::string token = "test-token-" + std::to_string(::getpid());
  StoreProcess store(token);
  RunResult res;
  res.codes.assign(static_cast<size_t>(n), -1);
  if (store.port() == 0) return res;
  uint16_t port = store.port();
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      BootstrapConfig cfg;
      cfg.rank = r;
      cfg.world_size = n;
      cfg.store_host = "127.0.0.1";
      cfg.store_port = port;
      cfg.host_store = false;
      cfg.job_token = token;
      cfg.timeout_ms = 30'000;
      cfg.launcher = "test";
      auto bs = Bootstrap::create(cfg);
      if (!bs) {
        std::fprintf(stderr, "rank %d bootstrap: %s\n", r, bs.error().message().c_str());
        ::_exit(90);
      }
      Rank ctx{r, n, std::shared_ptr<Bootstrap>(std::move(*bs)), port, token};
      int code = fn(ctx);
      std::fflush(stdout);
      std::fflush(stderr);
      ctx.bootstrap.reset();
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  size_t left = pids.size();
  while (left > 0) {
    bool reaped = false;
    for (size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (pids[i] > 0 && ::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        res.codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pids[i] = -1;
        --left;
        reaped = true;
      }
    }
    if (reaped) continue;
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t q : pids)
        if (q > 0) {
          std::fprintf(stderr, "harness: killing rank pid %d after %d s\n", q, timeout_s);
          ::kill(q, SIGKILL);
          ::waitpid(q, nullptr, 0);
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return res;
}

/// A communicator for a rank, or nullptr after printing why.
inline std::unique_ptr<Communicator> make_comm(Rank& r, CommOptions opts = {}) {
  auto c = Communicator::create(r.bootstrap, std::move(opts));
  if (!c) {
    std::fprintf(stderr, "rank %d communicator: %s\n", r.rank, c.error().message().c_str());
    return nullptr;
  }
  return std::move(*c);
}

// ---------------------------------------------------------------- transport-level helpers

struct Link {
  std::unique_ptr<Device> dev;
  std::vector<std::unique_ptr<Endpoint>> eps;
  Endpoint& to(int peer) { return *eps[static_cast<size_t>(peer)]; }
};

/// Opens `o.driver` (default shm) on every rank and connects every pair.
inline Result<Link> open_link(Rank& r, const char* name, DeviceOptions o = {}) {
  auto ids = GREX_TRY(r.bootstrap->all_gather(std::string(name) + "/id", std::to_string(::getpid())));
  if (o.driver.empty()) o.driver = "shm";
  o.rank = r.rank;
  o.world_size = r.size;
  o.job_id = "t" + ids[0] + "-" + name;
  o.connect_timeout_ms = 10'000;
  Link l;
  l.dev = GREX_TRY(Device::open(o));
  auto addrs = GREX_TRY(r.bootstrap->all_gather(std::string(name) + "/addr", GREX_TRY(l.dev->local_address())));
  l.eps.resize(static_cast<size_t>(r.size));
  for (int p = 0; p < r.size; ++p)
    if (p != r.rank) l.eps[static_cast<size_t>(p)] = GREX_TRY(l.dev->connect(p, addrs[static_cast<size_t>(p)]));
  GREX_TRY(r.bootstrap->barrier(std::string(name) + "/up"));
  return l;
}

// Deterministic payload: byte i of message `seed` is a simple mix of both.
inline void fill(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = static_cast<uint8_t>(x);
  }
}

inline uint64_t checksum(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Polls until `want` completions arrived (or timeout_ms pass); appends them to out.
inline bool drain(Device& dev, size_t want, std::vector<Completion>* out, int64_t timeout_ms = 20'000) {
  Deadline dl = Deadline::after_ms(timeout_ms);
  Completion cs[32];
  while (out->size() < want) {
    size_t n = dev.poll(cs);
    out->insert(out->end(), cs, cs + n);
    if (dl.expired()) return false;
  }
  return true;
}

/// Runs fn on n threads of this process, each a rank with its own Bootstrap
/// on one LocalStore (ranks as threads: the loop driver).
inline RunResult run_thread_ranks(int n, const std::function<int(Rank&)>& fn, int64_t store_timeout_ms = 30'000) {
  auto store = std::make_shared<LocalStore>();
  RunResult res;
  res.codes.assign(static_cast<size_t>(n), -1);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      Rank ctx{r, n, std::shared_ptr<Bootstrap>(Bootstrap::with_store(store, r, n, store_timeout_ms)), 0, ""};
      res.codes[static_cast<size_t>(r)] = fn(ctx);
    });
  for (auto& t : ranks) t.join();
  return res;
}

}  // namespace grex::test
