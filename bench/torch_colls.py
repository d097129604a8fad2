# SPDX-License-Identifier: Apache-2.0
"""Times one torch.distributed collective on CPU float32 tensors, for any
backend: -w warmup calls, then -n timed calls; rank 0 prints the slowest
rank's mean as "torch_coll OP BYTES US". BYTES is the size of the full
(gathered, or to-be-scattered) tensor. Run under grex-run or torchrun.
    OP: all_gather_into_tensor, reduce_scatter_tensor, all_reduce;
        pingpong, pingpong_any: ranks 0 and 1 bounce a BYTES tensor (send,
        then recv), rank 0 receiving from rank 1 by name or without src
        (recv_anysource); US is half a round trip"""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("op", choices=["all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "pingpong",
                               "pingpong_any"])
ap.add_argument("--bytes", type=int, default=16 << 20)
ap.add_argument("-n", type=int, default=10)
ap.add_argument("-w", type=int, default=3)
ap.add_argument("--backend", default="grex")
a = ap.parse_args()
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "torch"))
import common  # noqa: E402  (init under any launcher)

rank, size = common.init(a.backend)
n = a.bytes // 4 // size * size
full = torch.ones(n)
part = torch.ones(n // size)
if a.op == "all_gather_into_tensor":
    call = lambda: dist.all_gather_into_tensor(full, part)  # noqa: E731
elif a.op == "reduce_scatter_tensor":
    call = lambda: dist.reduce_scatter_tensor(part, full)  # noqa: E731
elif a.op.startswith("pingpong"):
    msg = torch.ones(max(1, a.bytes // 4))
    n = msg.numel()
    any_source = a.op == "pingpong_any"

    def call():
        if rank == 0:
            dist.send(msg, 1)
            if any_source:
                dist.recv(msg)
            else:
                dist.recv(msg, 1)
        elif rank == 1:
            dist.recv(msg, 0)
            dist.send(msg, 0)
else:
    call = lambda: dist.all_reduce(full)  # noqa: E731
for _ in range(a.w):
    call()
dist.barrier()
t0 = time.perf_counter()
for _ in range(a.n):
    call()
us = torch.tensor([(time.perf_counter() - t0) / a.n * 1e6 / (2 if a.op.startswith("pingpong") else 1)],
                  dtype=torch.float64)
dist.all_reduce(us, op=dist.ReduceOp.MAX)
if rank == 0:
    print(f"torch_coll {a.op} {n * 4} {us.item():.1f}", flush=True)
dist.destroy_process_group()
