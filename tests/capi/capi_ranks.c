/* SPDX-License-Identifier: Apache-2.0 */
/* Every call of the C API on a real communicator, compiled as C. Run under a
 * launcher (`grex-run -n N -- capi_ranks`), or with explicit arguments
 * (`capi_ranks RANK WORLD HOST:PORT TOKEN`, grex_comm_init_rank). Each check
 * prints what failed; the exit status is the number of failed checks (capped). */
#include <grex/grex.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
static int me = -1;

#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      fprintf(stderr, "rank %d: %s:%d: CHECK(%s) failed; last error: %s\n", me, __FILE__, __LINE__, #cond, \
              grex_last_error_message());                                                    \
      ++failures;                                                                            \
    }                                                                                        \
  } while (0)
#define OK(call) CHECK((call) == GREX_OK)

enum { N = 1000, ASYNC = 8 };

static void collectives(grex_comm_t* c, int rank, int size) {
  int32_t in[N], out[N];
  for (int i = 0; i < N; ++i) in[i] = rank * 1000 + i;
  OK(grex_allreduce(c, in, out, N, GREX_INT32, GREX_SUM));
  for (int i = 0; i < N; ++i) CHECK(out[i] == 1000 * size * (size - 1) / 2 + size * i);
  OK(grex_allreduce(c, in, in, N, GREX_INT32, GREX_MAX)); /* in place */
  for (int i = 0; i < N; ++i) CHECK(in[i] == (size - 1) * 1000 + i);

  float f[N];
  for (int i = 0; i < N; ++i) f[i] = (float)(rank + 1);
  OK(grex_allreduce(c, f, f, N, GREX_FLOAT32, GREX_AVG));
  CHECK(f[0] == (float)(size + 1) / 2.0f && f[N - 1] == f[0]);

  /* reduce_scatter: rank r gets block r, the sum over ranks of (rank + index). */
  int64_t* rs_in = malloc(sizeof(int64_t) * (size_t)size * N);
  int64_t rs_out[N];
  for (int i = 0; i < size * N; ++i) rs_in[i] = rank + i;
  OK(grex_reduce_scatter(c, rs_in, rs_out, N, GREX_INT64, GREX_SUM));
  for (int i = 0; i < N; ++i) CHECK(rs_out[i] == (int64_t)size * (size - 1) / 2 + (int64_t)size * (rank * N + i));

  /* allgather and alltoall. */
  uint8_t mine[N], *all = malloc((size_t)size * N), *a2a_in = malloc((size_t)size * N), *a2a_out = malloc((size_t)size * N);
  memset(mine, rank + 1, N);
  OK(grex_allgather(c, mine, all, N, GREX_UINT8));
  for (int r = 0; r < size; ++r) CHECK(all[r * N] == r + 1 && all[r * N + N - 1] == r + 1);
  for (int p = 0; p < size; ++p) memset(a2a_in + p * N, rank * 16 + p, N); /* block p goes to peer p */
  OK(grex_alltoall(c, a2a_in, a2a_out, N, GREX_UINT8));
  for (int p = 0; p < size; ++p) CHECK(a2a_out[p * N] == p * 16 + rank && a2a_out[p * N + N - 1] == p * 16 + rank);
  /* alltoallv: rank r sends r + p + 1 bytes to peer p, packed; they land in rank order. */
  size_t* vc = malloc(sizeof(size_t) * 4 * (size_t)size);
  size_t *vsd = vc + size, *vrc = vc + 2 * size, *vrd = vc + 3 * size, so = 0, ro = 0;
  for (int p = 0; p < size; ++p) {
    vc[p] = (size_t)(rank + p + 1), vsd[p] = so, so += vc[p];
    vrc[p] = (size_t)(p + rank + 1), vrd[p] = ro, ro += vrc[p];
  }
  uint8_t *v_in = malloc(so), *v_out = malloc(ro);
  for (int p = 0; p < size; ++p) memset(v_in + vsd[p], rank * 16 + p, vc[p]);
  OK(grex_alltoallv(c, v_in, vc, vsd, v_out, vrc, vrd, GREX_UINT8));
  for (int p = 0; p < size; ++p)
    CHECK(v_out[vrd[p]] == p * 16 + rank && v_out[vrd[p] + vrc[p] - 1] == p * 16 + rank);
  free(vc);
  free(v_in);
  free(v_out);

  /* broadcast from the last rank, reduce to rank 0. */
  double d[N];
  for (int i = 0; i < N; ++i) d[i] = rank == size - 1 ? i * 0.5 : -1.0;
  OK(grex_broadcast(c, d, N, GREX_FLOAT64, size - 1));
  CHECK(d[0] == 0.0 && d[N - 1] == (N - 1) * 0.5);
  for (int i = 0; i < N; ++i) d[i] = rank + 1;
  double red[N];
  OK(grex_reduce(c, d, rank == 0 ? red : NULL, N, GREX_FLOAT64, GREX_PROD, 0));
  if (rank == 0) {
    double prod = 1;
    for (int r = 1; r <= size; ++r) prod *= r;
    CHECK(red[0] == prod && red[N - 1] == prod);
  }
  OK(grex_barrier(c));
  free(rs_in);
  free(all);
  free(a2a_in);
  free(a2a_out);
}

static void point_to_point(grex_comm_t* c, int rank, int size) {
  if (size < 2) return;
  int token = rank == 0 ? 4711 : -1;
  if (rank == 0) {
    OK(grex_send(c, &token, sizeof token, 1, 7));
    OK(grex_recv(c, &token, sizeof token, size - 1, 7));
    CHECK(token == 4711 + size - 1);
  } else {
    OK(grex_recv(c, &token, sizeof token, rank - 1, 7));
    ++token;
    OK(grex_send(c, &token, sizeof token, (rank + 1) % size, 7));
  }
  /* Every rank at once: send to the next, receive from the previous. */
  int mine = 100 + rank, got = -1;
  OK(grex_sendrecv(c, &mine, sizeof mine, (rank + 1) % size, &got, sizeof got, (rank + size - 1) % size, 8));
  CHECK(got == 100 + (rank + size - 1) % size);

  /* Receives from any source, where the job set GREX_P2P_ANY_SOURCE=1 (capi_test.sh
   * grex_run_3); refused elsewhere. */
  const char* any = getenv("GREX_P2P_ANY_SOURCE");
  int from = -1, found = -1;
  if (any == NULL || strcmp(any, "1") != 0) {
    CHECK(grex_recv_any(c, &got, sizeof got, 9, &from) == GREX_ERR_INVALID_ARGUMENT);
    CHECK(grex_iprobe(c, 9, -1, &found, NULL, NULL) == GREX_ERR_INVALID_ARGUMENT);
    return;
  }
  if (rank != 0) {
    mine = 500 + rank;
    OK(grex_send(c, &mine, sizeof mine, 0, 9));
  } else {
    int seen = 0;
    for (int k = 1; k < size; ++k) {
      got = -1;
      OK(grex_recv_any(c, &got, sizeof got, 9, &from));
      CHECK(from > 0 && from < size && got == 500 + from && !(seen & (1 << from)));
      seen |= 1 << from;
    }
    size_t bytes = 0;
    OK(grex_iprobe(c, 9, -1, &found, &from, &bytes));
    CHECK(found == 0);
    CHECK(grex_recv_any(c, &got, sizeof got, 9, NULL) == GREX_ERR_INVALID_ARGUMENT);
  }
  OK(grex_barrier(c));
}

/* A deadline allreduce with every rank in time (a deadline no rank misses):
 * every rank contributes. */
static void deadline(grex_comm_t* c, int rank, int size) {
  int32_t v[4] = {rank, rank, rank, rank};
  int in[64];
  if (size > 64) return;
  OK(grex_allreduce_deadline(c, v, v, 4, GREX_INT32, GREX_SUM, 20000, 0, in));
  for (int r = 0; r < size; ++r) CHECK(in[r] == 1);
  CHECK(v[0] == size * (size - 1) / 2 && v[3] == v[0]);
  CHECK(grex_allreduce_deadline(c, v, v, 4, GREX_INT32, GREX_SUM, 0, 0, NULL) == GREX_ERR_INVALID_ARGUMENT);
}

static void compressed(grex_comm_t* c, int rank, int size) {
  /* Small integers are exact in bf16: the compressed sum is the exact sum. */
  float v[1000], w[1000];
  for (int i = 0; i < 1000; ++i) v[i] = (float)(rank + i % 7);
  OK(grex_allreduce_compressed(c, v, w, 1000, GREX_FLOAT32, GREX_SUM, GREX_COMPRESS_BF16, 1, NULL, NULL));
  for (int i = 0; i < 1000; ++i) CHECK(w[i] == (float)(size * (size - 1) / 2 + size * (i % 7)));
  grex_work_t* work = NULL;
  OK(grex_allreduce_compressed(c, v, w, 1000, GREX_FLOAT32, GREX_AVG, GREX_COMPRESS_FP16, 0, NULL, &work));
  OK(grex_work_wait(work));
  grex_work_free(work);
  CHECK(w[6] == (float)((size - 1) / 2.0 + 6));
  OK(grex_clear_feedback(c, NULL));
  CHECK(grex_allreduce_compressed(c, v, w, 1000, GREX_INT32, GREX_SUM, GREX_COMPRESS_BF16, 0, NULL, NULL) ==
        GREX_ERR_INVALID_ARGUMENT);
  /* Top-k with fraction 1 sends every value: the exact sum. With 1 value of
   * 1000 kept per rank, the largest (rank + 6 at i = 6, ...) is all that moves. */
  OK(grex_allreduce_topk(c, v, w, 1000, GREX_FLOAT32, GREX_SUM, 1.0, 0, NULL, NULL));
  for (int i = 0; i < 1000; ++i) CHECK(w[i] == (float)(size * (size - 1) / 2 + size * (i % 7)));
  for (int i = 0; i < 1000; ++i) v[i] = i == 500 + rank ? 100.0f + (float)rank : 1.0f;
  OK(grex_allreduce_topk(c, v, w, 1000, GREX_FLOAT32, GREX_SUM, 0.001, 0, NULL, NULL));
  for (int i = 0; i < 1000; ++i) CHECK(w[i] == (i >= 500 && i < 500 + size ? 100.0f + (float)(i - 500) : 0.0f));
  CHECK(grex_allreduce_topk(c, v, w, 1000, GREX_FLOAT32, GREX_SUM, 0.0, 0, NULL, NULL) == GREX_ERR_INVALID_ARGUMENT);
  CHECK(grex_allreduce_topk(c, v, w, 1000, GREX_FLOAT32, GREX_SUM, 1.5, 0, NULL, NULL) == GREX_ERR_INVALID_ARGUMENT);
}

static void non_blocking(grex_comm_t* c, int rank, int size) {
  /* 8 overlapping allreduces complete, correct, in issue order. */
  int32_t bufs[ASYNC][N];
  grex_work_t* w[ASYNC];
  for (int k = 0; k < ASYNC; ++k) {
    for (int i = 0; i < N; ++i) bufs[k][i] = k + rank;
    OK(grex_allreduce_async(c, bufs[k], bufs[k], N, GREX_INT32, GREX_SUM, &w[k]));
  }
  for (int k = ASYNC - 1; k >= 0; --k) OK(grex_work_wait(w[k]));
  for (int k = 0; k < ASYNC; ++k) {
    CHECK(bufs[k][0] == size * k + size * (size - 1) / 2);
    int done = 0;
    OK(grex_work_test(w[k], &done));
    CHECK(done == 1);
    grex_work_free(w[k]);
  }
  /* The other async collectives, waited with a timeout or polled. */
  uint8_t* ag = malloc((size_t)size * N), *a2a_in = malloc((size_t)size * N), *a2a_out = malloc((size_t)size * N);
  uint8_t small[N], red[N];
  memset(small, rank == 0 ? 3 : 0, N);
  memset(a2a_in, rank + 1, (size_t)size * N);
  float rs[N], rsout[10];
  for (int i = 0; i < N; ++i) rs[i] = 1.0f;
  grex_work_t *rsw, *agw, *a2aw, *bcw, *rdw, *barw;
  OK(grex_reduce_scatter_async(c, rs, rsout, 10, GREX_FLOAT32, GREX_SUM, &rsw));
  OK(grex_broadcast_async(c, small, N, GREX_UINT8, 0, &bcw));  /* every rank then holds 3s */
  OK(grex_allgather_async(c, small, ag, N, GREX_UINT8, &agw));
  OK(grex_alltoall_async(c, a2a_in, a2a_out, N, GREX_UINT8, &a2aw));
  OK(grex_reduce_async(c, a2a_in, rank == 0 ? red : NULL, N, GREX_UINT8, GREX_MAX, 0, &rdw));
  OK(grex_barrier_async(c, &barw));
  OK(grex_work_wait_timeout(rsw, 30000));
  CHECK(rsout[0] == (float)size && rsout[9] == (float)size);
  int done = 0;
  for (long spins = 0; !done && spins < 2000000000L; ++spins) OK(grex_work_test(barw, &done));
  CHECK(done == 1);
  OK(grex_work_wait(bcw));
  OK(grex_work_wait(agw));
  CHECK(ag[0] == 3 && ag[(size_t)size * N - 1] == 3);
  OK(grex_work_wait(a2aw));
  for (int p = 0; p < size; ++p) CHECK(a2a_out[p * N] == p + 1);
  OK(grex_work_wait(rdw));
  if (rank == 0) CHECK(red[0] == size && red[N - 1] == size);
  grex_work_t* none = NULL;
  grex_work_free(none); /* NULL is fine */
  grex_work_free(rsw);
  grex_work_free(bcw);
  grex_work_free(agw);
  grex_work_free(a2aw);
  grex_work_free(rdw);
  grex_work_free(barw);
  free(ag);
  free(a2a_in);
  free(a2a_out);
}

static void memory(grex_comm_t* c, int rank, int size) {
  void* p = NULL;
  OK(grex_mem_alloc(c, 1 << 20, &p));
  CHECK(p != NULL);
  float* v = p;
  for (int i = 0; i < (1 << 18); ++i) v[i] = 1.0f;
  OK(grex_allreduce(c, v, v, 1 << 18, GREX_FLOAT32, GREX_SUM));
  CHECK(v[0] == (float)size && v[(1 << 18) - 1] == (float)size);
  OK(grex_mem_free(c, p));

  char* host = malloc(1 << 16);
  OK(grex_mem_register(c, host, 1 << 16));
  CHECK(grex_mem_register(c, host, 1 << 16) == GREX_ERR_INVALID_ARGUMENT); /* twice */
  memset(host, rank, 1 << 16);
  OK(grex_allreduce(c, host, host, 1 << 16, GREX_UINT8, GREX_MAX));
  CHECK(host[0] == size - 1);
  OK(grex_mem_deregister(c, host));
  CHECK(grex_mem_deregister(c, host) == GREX_ERR_NOT_FOUND);
  CHECK(strstr(grex_last_error_message(), "not registered") != NULL);
  free(host);
}

static void errors(grex_comm_t* c, int size) {
  int32_t x[4] = {0};
  CHECK(grex_allreduce(c, x, x, 4, (grex_dtype_t)99, GREX_SUM) == GREX_ERR_INVALID_ARGUMENT);
  CHECK(strstr(grex_last_error_message(), "unknown dtype 99") != NULL);
  CHECK(grex_allreduce(c, x, x, 4, GREX_INT32, (grex_op_t)-1) == GREX_ERR_INVALID_ARGUMENT);
  CHECK(grex_allreduce(c, NULL, x, 4, GREX_INT32, GREX_SUM) == GREX_ERR_INVALID_ARGUMENT);
  CHECK(strstr(grex_last_error_message(), "sendbuf is NULL with count 4") != NULL);
  CHECK(grex_broadcast(c, x, 4, GREX_INT32, size) == GREX_ERR_INVALID_ARGUMENT);
  CHECK(grex_reduce(c, x, x, 4, GREX_INT32, GREX_SUM, -1) == GREX_ERR_INVALID_ARGUMENT);
  CHECK(grex_recv(c, NULL, 8, 0, 1) == GREX_ERR_INVALID_ARGUMENT);
  CHECK(grex_allreduce_async(c, x, x, 4, GREX_INT32, GREX_SUM, NULL) == GREX_ERR_INVALID_ARGUMENT);
  CHECK(grex_mem_alloc(c, 0, (void**)&x) == GREX_ERR_INVALID_ARGUMENT);
  OK(grex_allreduce(c, NULL, NULL, 0, GREX_INT32, GREX_SUM)); /* an empty vector is fine */
}

int main(int argc, char** argv) {
  grex_comm_t* c = NULL;
  grex_result_t rc = argc == 5 ? grex_comm_init_rank(atoi(argv[1]), atoi(argv[2]), argv[3], argv[4], &c)
                               : grex_comm_init_env(&c);
  if (rc != GREX_OK) {
    fprintf(stderr, "init: %s: %s\n", grex_strerror(rc), grex_last_error_message());
    return 100;
  }
  int rank = -1, size = 0;
  OK(grex_comm_rank(c, &rank));
  OK(grex_comm_size(c, &size));
  me = rank;
  CHECK(grex_abi_version() == GREX_ABI_VERSION);
  collectives(c, rank, size);
  point_to_point(c, rank, size);
  compressed(c, rank, size);
  deadline(c, rank, size);
  non_blocking(c, rank, size);
  memory(c, rank, size);
  errors(c, size);
  OK(grex_barrier(c));
  OK(grex_comm_destroy(c));
  if (failures == 0 && rank == 0) printf("capi: every call passed on %d ranks\n", size);
  return failures > 99 ? 99 : failures;
}
