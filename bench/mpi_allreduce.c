/* SPDX-License-Identifier: Apache-2.0 */
/* The Open MPI side of bench/compare_openmpi.sh: times MPI_Allreduce (float sum, out-of-place).
 *
 *   mpirun -np 2 mpi_allreduce [-n ITERS] [-w WARMUP] SIZE...
 *
 * SIZE is in bytes with an optional K, M or G suffix (powers of 1024). For each size,
 * rank 0 prints "size_bytes avg_us": the slowest rank's average time per call
 * (per-rank averages reduced with MPI_MAX), like grex-perf's time column. */
#include <mpi.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kDefaultIters = 20, kDefaultWarmup = 5 };

/* Parses "8", "64K", "1M", "2G"; returns 0 on error. */
static size_t parse_size(const char* text) {
  char* end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || end == text || text[0] == '-') return 0;
  if (*end == 'K' || *end == 'k') { v <<= 10; ++end; }
  else if (*end == 'M' || *end == 'm') { v <<= 20; ++end; }
  else if (*end == 'G' || *end == 'g') { v <<= 30; ++end; }
  if (*end == 'B') ++end;
  return *end == '\0' ? (size_t)v : 0;
}

/* Times one size; returns 0, or 1 if the result is wrong. */
static int run_size(size_t bytes, int iters, int warmup, int rank, int nranks) {
  size_t count = bytes / sizeof(float);
  float* in = malloc(count * sizeof(float) + 1);
  float* out = malloc(count * sizeof(float) + 1);
  if (in == NULL || out == NULL) {
    fprintf(stderr, "mpi_allreduce: rank %d: cannot allocate %zu bytes\n", rank, bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i < count; ++i) in[i] = (float)(rank + 1);
  memset(out, 0, count * sizeof(float));
  for (int i = 0; i < warmup; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double avg_us = (MPI_Wtime() - t0) * 1e6 / iters, slowest_us = 0;
  MPI_Allreduce(&avg_us, &slowest_us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  float want = (float)nranks * (float)(nranks + 1) / 2.0f;
  int bad = count > 0 && (out[0] != want || out[count - 1] != want);
  if (bad) fprintf(stderr, "mpi_allreduce: rank %d: wrong sum %g, expected %g\n", rank, (double)out[0], (double)want);
  if (rank == 0) printf("%zu %.2f\n", count * sizeof(float), slowest_us);
  fflush(stdout);
  free(in);
  free(out);
  return bad;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int iters = kDefaultIters, warmup = kDefaultWarmup, failed = 0, nsizes = 0;
  for (int i = 1; i < argc; ++i) {
    if ((strcmp(argv[i], "-n") == 0 || strcmp(argv[i], "-w") == 0) && i + 1 < argc) {
      int v = atoi(argv[i + 1]);
      if (argv[i][1] == 'n') iters = v > 0 ? v : 1;
      else warmup = v >= 0 ? v : 0;
      ++i;
      continue;
    }
    size_t bytes = parse_size(argv[i]);
    if (bytes == 0 || bytes / sizeof(float) > 0x7fffffff) {
      if (rank == 0) fprintf(stderr, "usage: mpi_allreduce [-n ITERS] [-w WARMUP] SIZE...  (bad size '%s')\n", argv[i]);
      MPI_Finalize();
      return 2;
    }
    failed |= run_size(bytes, iters, warmup, rank, nranks);
    ++nsizes;
  }
  if (nsizes == 0 && rank == 0) fprintf(stderr, "usage: mpi_allreduce [-n ITERS] [-w WARMUP] SIZE...\n");
  MPI_Finalize();
  return failed ? 1 : (nsizes == 0 ? 2 : 0);
}
