# SPDX-License-Identifier: Apache-2.0
"""Run by test_workloads.py under torchrun with 2 ranks: prints what gloo's
reduce_scatter_tensor gives for ReduceOp.AVG of 1 and 2 (1.5 averages, 3.0
sums: torch 2.7.1's gloo sums, and FSDP2 averages fp32 gradients with AVG)."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
out = torch.empty(2)
dist.reduce_scatter_tensor(out, torch.full((4,), float(rank + 1)), op=dist.ReduceOp.AVG)
if rank == 0:
    print(f"gloo-avg {out[0].item()}", flush=True)
dist.destroy_process_group()
