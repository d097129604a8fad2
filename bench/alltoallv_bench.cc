// SPDX-License-Identifier: Apache-2.0
// Alltoallv as embedding exchanges run it (issue 27): every rank sends every
// rank a piece of about BYTES (each pair a little different: BYTES + 4 *
// ((src + dst) % 5) bytes, so no two pieces line up), ITERS timed calls
// after WARMUP. Prints the slowest rank's mean time per call in µs and the
// bytes this rank sent to other hosts per call. Run under grex-run (or any
// launcher grex's from_env() knows); GREX_ALLTOALLV picks the form.
//   alltoallv_bench BYTES [ITERS] [WARMUP]
#include <grex/communicator.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: alltoallv_bench BYTES [ITERS] [WARMUP]\n");
    return 2;
  }
  const size_t bytes = std::strtoull(argv[1], nullptr, 10);
  const int iters = argc > 2 ? std::atoi(argv[2]) : 200, warmup = argc > 3 ? std::atoi(argv[3]) : 20;
  auto comm_r = grex::Communicator::from_env();
  if (!comm_r) {
    std::fprintf(stderr, "alltoallv_bench: %s\n", comm_r.error().message().c_str());
    return 1;
  }
  grex::Communicator& c = **comm_r;
  const size_t n = static_cast<size_t>(c.size()), me = static_cast<size_t>(c.rank());
  auto piece = [&](size_t from, size_t to) { return (bytes + 4 * ((from + to) % 5)) / 4; };  // int32s
  std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
  size_t so = 0, ro = 0;
  for (size_t r = 0; r < n; ++r) {
    sd[r] = so, sc[r] = piece(me, r), so += sc[r];
    rd[r] = ro, rc[r] = piece(r, me), ro += rc[r];
  }
  std::vector<int32_t> in(so, static_cast<int32_t>(me)), out(ro, -1);
  for (int i = 0; i < warmup; ++i)
    if (auto e = c.alltoallv(in.data(), sc, sd, out.data(), rc, rd, grex::DataType::kInt32); !e) {
      std::fprintf(stderr, "alltoallv_bench: %s\n", e.error().message().c_str());
      return 1;
    }
  for (size_t r = 0; r < n; ++r)
    if (out[rd[r]] != static_cast<int32_t>(r) || out[rd[r] + rc[r] - 1] != static_cast<int32_t>(r)) {
      std::fprintf(stderr, "alltoallv_bench: wrong data from rank %zu\n", r);
      return 1;
    }
  const uint64_t before = c.stats().bytes_inter_host;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i)
    if (auto e = c.alltoallv(in.data(), sc, sd, out.data(), rc, rd, grex::DataType::kInt32); !e) {
      std::fprintf(stderr, "alltoallv_bench: %s\n", e.error().message().c_str());
      return 1;
    }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  const uint64_t across = (c.stats().bytes_inter_host - before) / static_cast<uint64_t>(iters);
  double slowest = us;
  if (auto e = c.allreduce(&slowest, 1, grex::DataType::kFloat64, grex::ReduceOp::kMax); !e) return 1;
  if (me == 0) std::printf("alltoallv %zu B: %.1f us, %llu B across hosts per call (rank 0)\n", bytes, slowest,
                           static_cast<unsigned long long>(across));
  return 0;
}
