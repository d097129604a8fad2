# SPDX-License-Identifier: Apache-2.0
"""Train a small MLP with DistributedDataParallel over the grex backend, and the
same run over gloo, and print both loss curves side by side.

    grex-run -n 4 -- python3 examples/pytorch_ddp.py                 # grex-run
    torchrun --standalone --nproc_per_node 4 --redirects 1 --tee 1 examples/pytorch_ddp.py
    mpirun -np 4 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 python3 examples/pytorch_ddp.py

Options: --steps N (20), --batch B per rank (64), --hidden H (1536: 5.5 M
parameters), --warmup W (3 steps left out of the timing), --only grex|gloo.
(Debian's torch: run it with the system python3, the interpreter that has torch.)
"""
import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import grex_torch

IN_FEATURES = 512
CLASSES = 10


def make_model(hidden):
    torch.manual_seed(0)  # the same initial weights on every rank and for both backends
    return torch.nn.Sequential(
        torch.nn.Linear(IN_FEATURES, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, CLASSES))


def batch(rank, step, size):
    """A synthetic batch, different on every rank and step, labelled by a fixed random teacher."""
    g = torch.Generator().manual_seed(1000003 * step + rank)
    x = torch.randn(size, IN_FEATURES, generator=g)
    teacher = torch.Generator().manual_seed(42)
    w = torch.randn(IN_FEATURES, CLASSES, generator=teacher)
    return x, (x @ w).argmax(dim=1)


def train(rank, world, steps, group=None, batch_size=64, hidden=1536, lr=0.05, times=None):
    """DDP training on `group` (None: the default group, grex). Returns this rank's
    losses per step and the trained model; appends step times to `times`."""
    model = make_model(hidden)
    ddp = DDP(model, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9)
    losses = []
    for step in range(steps):
        x, y = batch(rank, step, batch_size)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()  # DDP's buckets are allreduced while backward runs
        opt.step()
        if times is not None:
            times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    return losses, model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=1536)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", choices=["grex", "gloo"])
    a = ap.parse_args()
    rank, world = grex_torch.init_from_env()
    runs = {}
    for name in ("grex", "gloo"):
        if a.only and name != a.only:
            continue
        group = None if name == "grex" else dist.new_group(backend="gloo")
        times = []
        losses, _ = train(rank, world, a.steps, group, a.batch, a.hidden, times=times)
        timed = times[a.warmup:] or times
        runs[name] = (losses, sum(timed) / len(timed))
    if rank == 0:
        params = sum(p.numel() for p in make_model(a.hidden).parameters())
        print(f"# {world} ranks, {params / 1e6:.1f} M parameters, batch {a.batch} per rank, {a.steps} steps")
        names = list(runs)
        print("# step " + " ".join(f"{'loss ' + n:>12}" for n in names))
        for s in range(a.steps):
            print(f"{s:6d} " + " ".join(f"{runs[n][0][s]:12.6f}" for n in names))
        for n in names:
            print(f"# {n}: mean step {runs[n][1] * 1e3:.1f} ms (steps {a.warmup}..{a.steps - 1})")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
