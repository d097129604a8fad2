// SPDX-License-Identifier: Apache-2.0
// The Gloo side of bench/allreduce_compare.sh: times a float-sum allreduce with Gloo's
// tcp transport on one host (Debian libgloo-dev, 2022 snapshot).
//
//   gloo_allreduce -np N [--algo ALGO] [-n ITERS] [-w WARMUP] [SIZE... | -b MIN -e MAX -f F]
//   gloo_allreduce --rank R --size N --store DIR [...]     (one rank; or GLOO_RANK, GLOO_SIZE,
//                                                           GLOO_STORE in the environment)
//
// -np N forks the N ranks itself, with a fresh file store in a temporary directory. SIZE is in
// bytes with an optional K, M or G suffix (powers of 1024); without sizes the sweep is MIN,
// MIN*F, ... up to MAX and then MAX itself (default 8 B to 256 MiB, factor 4). For each size,
// rank 0 prints "size_bytes avg_us": the slowest rank's average time per call, like
// bench/mpi_allreduce and grex-perf's time column. Lines starting with '#' are comments.
//
// ALGO:
//   ring              gloo::allreduce (the options API PyTorch uses) with the ring algorithm:
//                     reduce-scatter + allgather in segments of at most 1 MiB; out of place
//   bcube             gloo::allreduce with the bcube algorithm; out of place
//   halving_doubling  gloo::AllreduceHalvingDoubling (legacy class; in place)
//   ring_chunked      gloo::AllreduceRingChunked (legacy class; in place)
//   ring_legacy       gloo::AllreduceRing (legacy class; in place; the whole vector goes
//                     around the ring n-1 times)
//
// Fairness notes (see PEERS-NOTES.md in shared/ beside the repository):
// - Gloo's tcp pair grows a socket's SO_SNDBUF from the size of the messages it sends and
//   thereby turns off the kernel's send-buffer autotuning; a small first message (a legacy
//   barrier, a tiny allreduce) leaves large transfers with a small buffer. So nothing but the
//   timed algorithm ever runs over the sockets: ranks synchronise through the warmup calls of
//   that algorithm, and the per-rank times travel through the rendezvous store, not through
//   Gloo. Give each algorithm (and, to be safe, each size) its own processes.
// - Buffers are allocated and touched once for the largest size; every warmup call is untimed.
// - After the timed calls each size is checked once: inputs rank+1, one call, the sum must
//   be n(n+1)/2 at the first and last element.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

namespace {

enum class Algo { kRing, kBcube, kHalvingDoubling, kRingChunked, kRingLegacy };

struct AlgoName {
  const char* name;
  Algo algo;
  bool in_place;
};

constexpr AlgoName kAlgos[] = {
    {"ring", Algo::kRing, false},
    {"bcube", Algo::kBcube, false},
    {"halving_doubling", Algo::kHalvingDoubling, true},
    {"ring_chunked", Algo::kRingChunked, true},
    {"ring_legacy", Algo::kRingLegacy, true},
};

struct Args {
  int spawn = 0;  // -np N: fork N ranks
  int rank = -1;
  int size = -1;
  std::string store;
  std::string host = "127.0.0.1";
  const AlgoName* algo = &kAlgos[0];
  int iters = -1;   // -1: by size (see default_iters)
  int warmup = -1;  // -1: iters / 10, at least 1
  int timeout_s = 600;
  size_t min_bytes = 8, max_bytes = size_t{256} << 20, factor = 4;
  std::vector<size_t> sizes;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "gloo_allreduce: %s\n"
               "usage: gloo_allreduce (-np N | --rank R --size N --store DIR) [--algo ring|bcube|"
               "halving_doubling|ring_chunked|ring_legacy]\n"
               "       [-n ITERS] [-w WARMUP] [--host ADDR] [--timeout-s S] [SIZE... | -b MIN -e MAX -f F]\n",
               why);
  std::exit(2);
}

// Parses "8", "64K", "1M", "2G" (optional trailing B); 0 on error.
size_t parse_size(const char* text) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || text[0] == '-') return 0;
  if (*end == 'K' || *end == 'k') { v <<= 10; ++end; }
  else if (*end == 'M' || *end == 'm') { v <<= 20; ++end; }
  else if (*end == 'G' || *end == 'g') { v <<= 30; ++end; }
  if (*end == 'B') ++end;
  return *end == '\0' ? static_cast<size_t>(v) : 0;
}

int parse_int(const char* text, const char* opt, int lo) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > 100000000) usage((std::string("bad value for ") + opt).c_str());
  return static_cast<int>(v);
}

Args parse_args(int argc, char** argv) {
  Args a;
  if (const char* e = std::getenv("GLOO_RANK")) a.rank = std::atoi(e);
  if (const char* e = std::getenv("GLOO_SIZE")) a.size = std::atoi(e);
  if (const char* e = std::getenv("GLOO_STORE")) a.store = e;
  for (int i = 1; i < argc; ++i) {
    std::string_view o = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage((std::string("option ") + argv[i] + " needs a value").c_str());
      return argv[++i];
    };
    if (o == "-np") a.spawn = parse_int(value(), "-np", 1);
    else if (o == "--rank") a.rank = parse_int(value(), "--rank", 0);
    else if (o == "--size") a.size = parse_int(value(), "--size", 1);
    else if (o == "--store") a.store = value();
    else if (o == "--host") a.host = value();
    else if (o == "-n") a.iters = parse_int(value(), "-n", 1);
    else if (o == "-w") a.warmup = parse_int(value(), "-w", 0);
    else if (o == "--timeout-s") a.timeout_s = parse_int(value(), "--timeout-s", 1);
    else if (o == "-b" || o == "-e" || o == "-f") {
      size_t v = parse_size(value());
      if (v == 0) usage("bad size");
      (o == "-b" ? a.min_bytes : o == "-e" ? a.max_bytes : a.factor) = v;
    } else if (o == "--algo") {
      std::string_view name = value();
      a.algo = nullptr;
      for (const auto& k : kAlgos)
        if (name == k.name) a.algo = &k;
      if (a.algo == nullptr) usage("unknown --algo");
    } else if (o == "-h" || o == "--help") {
      usage("help");
    } else {
      size_t v = parse_size(argv[i]);
      if (v == 0 || v / sizeof(float) > 0x7fffffff) usage((std::string("bad size '") + argv[i] + "'").c_str());
      a.sizes.push_back(v);
    }
  }
  if (a.sizes.empty()) {
    if (a.factor < 2 || a.min_bytes > a.max_bytes) usage("need -f >= 2 and -b <= -e");
    for (size_t s = a.min_bytes; s <= a.max_bytes; s *= a.factor) a.sizes.push_back(s);
    if (a.sizes.back() != a.max_bytes) a.sizes.push_back(a.max_bytes);
  }
  for (size_t& s : a.sizes) s = std::max<size_t>(s / sizeof(float), 1) * sizeof(float);
  if (a.spawn == 0 && (a.rank < 0 || a.size < 1 || a.rank >= a.size || a.store.empty()))
    usage("need -np N, or --rank/--size/--store (or GLOO_RANK/GLOO_SIZE/GLOO_STORE)");
  return a;
}

// Iterations when -n is not given: about 1 GiB of vector per size, 5 to 1000 calls.
int default_iters(size_t bytes) {
  size_t n = (size_t{1} << 30) / bytes;
  return static_cast<int>(std::clamp<size_t>(n, 5, 1000));
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// One allreduce of `count` floats at `out` (in place) or from `in` to `out`.
class Runner {
 public:
  Runner(const std::shared_ptr<gloo::Context>& ctx, const AlgoName& algo, float* in, float* out, size_t count)
      : algo_(algo.algo) {
    int n = static_cast<int>(count);
    switch (algo_) {
      case Algo::kRing:
      case Algo::kBcube:
        opts_ = std::make_unique<gloo::AllreduceOptions>(ctx);
        opts_->setAlgorithm(algo_ == Algo::kRing ? gloo::AllreduceOptions::Algorithm::RING
                                                 : gloo::AllreduceOptions::Algorithm::BCUBE);
        opts_->setInput(in, count);
        opts_->setOutput(out, count);
        opts_->setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
        opts_->setTag(7);
        break;
      case Algo::kHalvingDoubling:
        legacy_ = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(ctx, std::vector<float*>{out}, n);
        break;
      case Algo::kRingChunked:
        legacy_ = std::make_unique<gloo::AllreduceRingChunked<float>>(ctx, std::vector<float*>{out}, n);
        break;
      case Algo::kRingLegacy:
        legacy_ = std::make_unique<gloo::AllreduceRing<float>>(ctx, std::vector<float*>{out}, n);
        break;
    }
  }

  void run() {
    if (opts_) gloo::allreduce(*opts_);
    else legacy_->run();
  }

 private:
  Algo algo_;
  std::unique_ptr<gloo::AllreduceOptions> opts_;
  std::unique_ptr<gloo::Algorithm> legacy_;
};

std::vector<char> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }

// Store keys: "t<size index>/<rank>" (a rank's time), "done/<rank>".
std::string key(const char* kind, size_t idx, int rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%zu/%d", kind, idx, rank);
  return buf;
}

int run_rank(const Args& a, int rank, int size, const std::string& store_dir) {
  gloo::transport::tcp::attr attr;
  attr.hostname = a.host;
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(store_dir);
  gloo::rendezvous::PrefixStore store("gloo_allreduce", file_store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(std::chrono::seconds(a.timeout_s));
  ctx->connectFullMesh(store, dev);

  size_t max_bytes = *std::max_element(a.sizes.begin(), a.sizes.end());
  size_t max_count = max_bytes / sizeof(float);
  // Both buffers touched once up front, as grex-perf and mpi_allreduce do.
  std::vector<float> in(max_count, 0.0f), out(max_count, 0.0f);
  const bool in_place = a.algo->in_place;
  const float want = static_cast<float>(size) * static_cast<float>(size + 1) / 2.0f;

  if (rank == 0) {
    std::printf("# gloo_allreduce algo %s (%s) ranks %d transport tcp host %s, float sum\n", a.algo->name,
                in_place ? "in place" : "out of place", size, a.host.c_str());
    std::printf("# size_bytes avg_us (slowest rank's average per call)\n");
    std::fflush(stdout);
  }
  int failed = 0;
  for (size_t idx = 0; idx < a.sizes.size(); ++idx) {
    size_t bytes = a.sizes[idx];
    size_t count = bytes / sizeof(float);
    int iters = a.iters > 0 ? a.iters : default_iters(bytes);
    int warmup = a.warmup >= 0 ? a.warmup : std::max(1, iters / 10);
    float* src = in_place ? out.data() : in.data();
    std::fill_n(src, count, static_cast<float>(rank + 1));
    Runner runner(ctx, *a.algo, in.data(), out.data(), count);
    // At least one untimed call: it synchronises the ranks before the clock starts.
    for (int i = 0; i < std::max(warmup, 1); ++i) runner.run();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) runner.run();
    double avg_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;

    // Check once (in place: the timed calls grew the values, so start again from the inputs).
    std::fill_n(src, count, static_cast<float>(rank + 1));
    runner.run();
    bool bad = out[0] != want || out[count - 1] != want;
    if (bad) {
      std::fprintf(stderr, "gloo_allreduce: rank %d: size %zu: wrong sum %g/%g, expected %g\n", rank, bytes,
                   static_cast<double>(out[0]), static_cast<double>(out[count - 1]), static_cast<double>(want));
      failed = 1;
    }

    // The slowest rank's average, gathered through the store (no traffic on Gloo's sockets).
    char text[64];
    std::snprintf(text, sizeof text, "%.6f %d", avg_us, bad ? 1 : 0);
    store.set(key("t", idx, rank), to_bytes(text));
    if (rank == 0) {
      double slowest = 0;
      int bad_ranks = 0;
      for (int r = 0; r < size; ++r) {
        std::string k = key("t", idx, r);
        store.wait({k}, std::chrono::seconds(a.timeout_s));
        std::vector<char> v = store.get(k);
        std::string s(v.begin(), v.end());
        double t = 0;
        int b = 0;
        std::sscanf(s.c_str(), "%lf %d", &t, &b);
        slowest = std::max(slowest, t);
        bad_ranks += b;
      }
      if (bad_ranks == 0) std::printf("%zu %.2f\n", bytes, slowest);
      else std::printf("# %zu %.2f WRONG on %d ranks\n", bytes, slowest, bad_ranks);
      std::fflush(stdout);
    }
  }
  // Every rank must be done with the sockets before any closes them.
  store.set(key("done", 0, rank), to_bytes("1"));
  for (int r = 0; r < size; ++r) store.wait({key("done", 0, r)}, std::chrono::seconds(a.timeout_s));
  return failed;
}

int run_rank_guarded(const Args& a, int rank, int size, const std::string& store_dir) {
  try {
    return run_rank(a, rank, size, store_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce: rank %d: %s\n", rank, e.what());
    return 1;
  }
}

// -np N: a fresh file store, N forked ranks; fails if any rank fails.
int spawn(const Args& a) {
  char tmpl[] = "/tmp/gloo_allreduce.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("gloo_allreduce: mkdtemp");
    return 1;
  }
  std::string dir = tmpl;
  std::fflush(stdout);
  std::vector<pid_t> pids;
  const pid_t launcher = getpid();
  for (int r = 0; r < a.spawn; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("gloo_allreduce: fork");
      for (pid_t p : pids) kill(p, SIGTERM);
      break;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // a killed launcher takes its ranks along
      if (getppid() != launcher) _exit(1);
      int rc = run_rank_guarded(a, r, a.spawn, dir);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  int failed = static_cast<int>(pids.size()) != a.spawn;
  while (!pids.empty()) {  // pids: the children not yet reaped
    int status = 0;
    pid_t pid = wait(&status);
    if (pid < 0) break;
    auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end()) continue;
    pids.erase(it);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (!failed)  // the first failure ends the other ranks (only our own, unreaped children)
        for (pid_t p : pids) kill(p, SIGTERM);
      failed = 1;
    }
  }
  std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "gloo_allreduce: could not remove %s\n", dir.c_str());
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse_args(argc, argv);
  if (a.spawn > 0) return spawn(a);
  return run_rank_guarded(a, a.rank, a.size, a.store);
}
