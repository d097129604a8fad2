/* SPDX-License-Identifier: Apache-2.0 */
/* A C trainer's gradient exchange with grex: every rank contributes a vector,
 * the allreduce averages it in place, and rank 0 prints the first values.
 *
 *   grex-run -n 4 -- ./c_allreduce          (or under mpirun / torchrun / srun)
 */
#include <grex/grex.h>

#include <stdio.h>
#include <stdlib.h>

#define COUNT (1u << 20)

static int check(grex_result_t rc, const char* what) {
  if (rc == GREX_OK) return 0;
  fprintf(stderr, "%s: %s: %s\n", what, grex_strerror(rc), grex_last_error_message());
  return 1;
}

int main(void) {
  grex_comm_t* comm = NULL;
  if (check(grex_comm_init_env(&comm), "grex_comm_init_env")) return 1;
  int rank = 0, size = 1;
  grex_comm_rank(comm, &rank);
  grex_comm_size(comm, &size);

  float* grads = NULL;  /* memory the backend serves best (shm: no extra copy) */
  if (check(grex_mem_alloc(comm, COUNT * sizeof(float), (void**)&grads), "grex_mem_alloc")) return 1;
  for (size_t i = 0; i < COUNT; ++i) grads[i] = (float)(rank + 1) * (float)(i % 7);

  /* Average in place: (1 + 2 + ... + size) / size * (i % 7). */
  int failed = check(grex_allreduce(comm, grads, grads, COUNT, GREX_FLOAT32, GREX_AVG), "grex_allreduce");
  float expect = (float)(size + 1) / 2.0f;
  for (size_t i = 0; !failed && i < COUNT; ++i)
    if (grads[i] != expect * (float)(i % 7)) {
      fprintf(stderr, "rank %d: element %zu is %g, expected %g\n", rank, i, grads[i], expect * (float)(i % 7));
      failed = 1;
    }
  if (!failed && rank == 0)
    printf("grex %s (ABI %d): averaged %u floats over %d ranks: %g %g %g ...\n", grex_version(), grex_abi_version(),
           COUNT, size, grads[0], grads[1], grads[2]);
  grex_mem_free(comm, grads);
  grex_comm_destroy(comm);
  return failed;
}
