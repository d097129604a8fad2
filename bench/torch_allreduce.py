# SPDX-License-Identifier: Apache-2.0
"""Times in-place all_reduce of one float32 tensor through torch.distributed
(backend grex or gloo), as grex-perf times Communicator::allreduce: warmup
calls, then -n timed calls, the slowest rank's mean printed by rank 0 as
"torch_allreduce BYTES US". Run under grex-run with grex_torch importable."""
import argparse
import time

import torch
import torch.distributed as dist

import grex_torch

ap = argparse.ArgumentParser()
ap.add_argument("--bytes", type=int, default=25 << 20)
ap.add_argument("-n", type=int, default=20)
ap.add_argument("-w", type=int, default=5)
ap.add_argument("--backend", default="grex")
a = ap.parse_args()
rank, size = grex_torch.init_from_env(backend=a.backend)
t = torch.ones(a.bytes // 4)
for _ in range(a.w):
    dist.all_reduce(t)
dist.barrier()
t0 = time.perf_counter()
for _ in range(a.n):
    dist.all_reduce(t)
us = torch.tensor([(time.perf_counter() - t0) / a.n * 1e6], dtype=torch.float64)
dist.all_reduce(us, op=dist.ReduceOp.MAX)
if rank == 0:
    print(f"torch_allreduce {a.bytes} {us.item():.1f}", flush=True)
dist.destroy_process_group()
