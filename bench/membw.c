/* SPDX-License-Identifier: Apache-2.0 */
/* Memory-bandwidth reference for bench/allreduce_compare.sh: what one core can copy and add.
 *
 *   membw [-s SIZE] [-r REPS] [-t THREADS]
 *
 * Each thread owns three SIZE-byte buffers (default 256 MiB), touched before timing, and
 * times REPS (default 5) rounds of
 *   memcpy   dst = src (glibc memcpy)
 *   ntcopy   dst = src with streaming (non-temporal) stores, which skip reading dst's lines
 *   add      c[i] = a[i] + b[i] over floats (vectorised for AVX-512, AVX2 or SSE2)
 * keeping the best round. With THREADS > 1 the threads run at the same time (each on its
 * own buffers) and the figures are per thread (the mean of the threads' best rounds), which
 * shows how much two busy cores take from each other. Output, one "key value" per line:
 *   memcpy_GBps  bytes copied per second (memory traffic is 2x that)
 *   ntcopy_GBps  the same with streaming stores
 *   add_GBps     bytes of c produced per second (memory traffic is 3x that)
 * GB = 1e9 bytes. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static size_t g_bytes = (size_t)256 << 20;
static int g_reps = 5;
static pthread_barrier_t g_barrier;

struct result {
  double memcpy_gbps;
  double ntcopy_gbps;
  double add_gbps;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((target_clones("avx512f", "avx2", "default"), noinline)) static void add_f32(
    float* restrict c, const float* restrict a, const float* restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

/* dst = src, n floats, stores that bypass the cache where the CPU has them (SSE2 on x86-64). */
static void ntcopy_f32(float* restrict dst, const float* restrict src, size_t n) {
  size_t i = 0;
#if defined(__x86_64__)
  for (; i < n && ((uintptr_t)(dst + i) & 15) != 0; ++i) dst[i] = src[i];
  for (; i + 16 <= n; i += 16) {
    __m128 x0 = _mm_loadu_ps(src + i), x1 = _mm_loadu_ps(src + i + 4);
    __m128 x2 = _mm_loadu_ps(src + i + 8), x3 = _mm_loadu_ps(src + i + 12);
    _mm_stream_ps(dst + i, x0);
    _mm_stream_ps(dst + i + 4, x1);
    _mm_stream_ps(dst + i + 8, x2);
    _mm_stream_ps(dst + i + 12, x3);
  }
  _mm_sfence();
#endif
  for (; i < n; ++i) dst[i] = src[i];
}

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

static void* worker(void* arg) {
  struct result* res = arg;
  size_t n = g_bytes / sizeof(float);
  float* a = malloc(g_bytes);
  float* b = malloc(g_bytes);
  float* c = malloc(g_bytes);
  if (a == NULL || b == NULL || c == NULL) {
    fprintf(stderr, "membw: cannot allocate 3 x %zu bytes\n", g_bytes);
    exit(1);
  }
  for (size_t i = 0; i < n; ++i) {
    a[i] = (float)(i & 1023);
    b[i] = 1.0f;
    c[i] = 0.0f;
  }
  double best_copy = 1e30, best_nt = 1e30, best_add = 1e30;
  for (int r = 0; r < g_reps; ++r) {
    pthread_barrier_wait(&g_barrier);
    double t0 = now_s();
    memcpy(c, a, g_bytes);
    double t1 = now_s();
    pthread_barrier_wait(&g_barrier);
    double t2 = now_s();
    ntcopy_f32(c, a, n);
    double t3 = now_s();
    pthread_barrier_wait(&g_barrier);
    double t4 = now_s();
    add_f32(c, a, b, n);
    double t5 = now_s();
    if (t1 - t0 < best_copy) best_copy = t1 - t0;
    if (t3 - t2 < best_nt) best_nt = t3 - t2;
    if (t5 - t4 < best_add) best_add = t5 - t4;
  }
  if (c[n - 1] != a[n - 1] + b[n - 1]) fprintf(stderr, "membw: wrong sum\n");
  res->memcpy_gbps = (double)g_bytes / best_copy / 1e9;
  res->ntcopy_gbps = (double)g_bytes / best_nt / 1e9;
  res->add_gbps = (double)g_bytes / best_add / 1e9;
  free(a);
  free(b);
  free(c);
  return NULL;
}

int main(int argc, char** argv) {
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 < argc && strcmp(argv[i], "-s") == 0) {
      g_bytes = parse_size(argv[++i]) / sizeof(float) * sizeof(float);
    } else if (i + 1 < argc && strcmp(argv[i], "-r") == 0) {
      g_reps = atoi(argv[++i]);
    } else if (i + 1 < argc && strcmp(argv[i], "-t") == 0) {
      threads = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: membw [-s SIZE] [-r REPS] [-t THREADS]\n");
      return 2;
    }
  }
  if (g_bytes == 0 || g_reps < 1 || threads < 1 || threads > 256) {
    fprintf(stderr, "membw: bad -s, -r or -t\n");
    return 2;
  }
  pthread_barrier_init(&g_barrier, NULL, (unsigned)threads);
  pthread_t tid[256];
  struct result res[256];
  for (int t = 0; t < threads; ++t) pthread_create(&tid[t], NULL, worker, &res[t]);
  double copy = 0, nt = 0, add = 0;
  for (int t = 0; t < threads; ++t) {
    pthread_join(tid[t], NULL);
    copy += res[t].memcpy_gbps / threads;
    nt += res[t].ntcopy_gbps / threads;
    add += res[t].add_gbps / threads;
  }
  printf("# membw: %zu bytes per buffer, best of %d rounds, %d thread(s) at once, per thread\n", g_bytes, g_reps,
         threads);
  printf("memcpy_GBps %.2f\n", copy);
  printf("ntcopy_GBps %.2f\n", nt);
  printf("add_GBps %.2f\n", add);
  return 0;
}
