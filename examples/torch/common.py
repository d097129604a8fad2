# SPDX-License-Identifier: Apache-2.0
"""What the torch examples share: start-up under any launcher, a synthetic
task that every backend sees the same way, and the per-step report.

Every example runs one backend per launch (--backend grex, the default, or
gloo, nccl, ...), so the same command with --backend gloo is the reference.
"""
import argparse
import datetime
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

IN_FEATURES = 256
CLASSES = 10
MOMENTUM = 0.9  # train()'s SGD


def parse(description, **extra):
    """The common options, plus `extra` {flag: (type, default, help)}."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="grex", help="torch.distributed backend (grex, gloo, ...)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=0.2, help="SGD learning rate (momentum 0.9)")
    ap.add_argument("--seed", type=int, default=0,
                    help="the run's seed: the model's initial weights and every rank's batches "
                         "(a loss compared across variants is worth averaging over a few)")
    ap.add_argument("--json", action="store_true", help="rank 0 ends with one JSON line: losses and step times")
    for flag, (kind, default, text) in extra.items():
        if kind is bool:
            ap.add_argument(flag, action="store_true", help=text)
        else:
            ap.add_argument(flag, type=kind, default=default, help=text)
    return ap.parse_args()


def init(backend):
    """init_process_group for torchrun, grex-run, mpirun or srun; returns (rank, world)."""
    if "grex" in backend:  # "grex", or a device map such as "cpu:grex,cuda:nccl"
        import grex_torch  # registers the backend
        return grex_torch.init_from_env(timeout=datetime.timedelta(minutes=2), backend=backend)
    if "RANK" not in os.environ and "OMPI_COMM_WORLD_RANK" in os.environ:
        os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
        os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group(backend, timeout=datetime.timedelta(minutes=2))
    return dist.get_rank(), dist.get_world_size()


def mlp(hidden, seed=0):
    """The model: the same initial weights on every rank and for every backend."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(IN_FEATURES, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, CLASSES))


EVAL_SEED = 999_983  # batch(EVAL_SEED, 0, ...): held out from training (train()'s seeds are far below it)


def batch(seed, step, size):
    """A synthetic batch for (seed, step), labelled by a fixed random teacher."""
    g = torch.Generator().manual_seed(1000003 * step + seed)
    x = torch.randn(size, IN_FEATURES, generator=g)
    w = torch.randn(IN_FEATURES, CLASSES, generator=torch.Generator().manual_seed(42))
    return x, (x @ w).argmax(dim=1)


class Report:
    """Rank 0 prints each step's loss and time; --json adds a summary line."""

    def __init__(self, rank, world, name, args):
        self.rank, self.args, self.losses, self.ms, self.comm_ms = rank, args, [], [], []
        if rank == 0:
            print(f"{name}: {world} ranks, backend {args.backend}, torch {torch.__version__}", flush=True)

    def step(self, i, loss, t0, comm_ms=None):
        """One step's loss, and the time since t0; comm_ms where the example measures it."""
        self.ms.append((time.perf_counter() - t0) * 1e3)
        self.losses.append(float(loss))
        comm = ""
        if comm_ms is not None:
            self.comm_ms.append(comm_ms)
            comm = f"  communication {comm_ms:8.2f} ms"
        if self.rank == 0:
            print(f"step {i:3d}  loss {self.losses[-1]:.6f}  step {self.ms[-1]:8.2f} ms{comm}", flush=True)

    def end(self, eval_loss=None):
        if self.rank == 0 and eval_loss is not None:
            print(f"eval loss {eval_loss:.6f}", flush=True)
        if self.rank == 0 and self.args.json:
            print(json.dumps({"losses": self.losses, "step_ms": self.ms, "comm_ms": self.comm_ms,
                              "eval_loss": eval_loss}), flush=True)
        dist.barrier()
        dist.destroy_process_group()


def train(model, args, rank, world, name, batch_seed, comm_ms=None, delay_ms=0):
    """SGD with momentum on `model` for args.steps steps of batch(batch_seed + 100 * args.seed, step),
    reporting as Report does; comm_ms() gives a step's communication time where
    the example measures it; the last rank sleeps delay_ms in every step (a
    straggler). Ends the process group."""
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=MOMENTUM)
    report = Report(rank, world, name, args)
    batch_seed += 100 * args.seed  # ranks train on seeds 100 s .. 100 s + world - 1
    for step in range(args.steps):
        x, y = batch(batch_seed, step, args.batch)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        if delay_ms and rank == world - 1:
            time.sleep(delay_ms / 1000)
        loss.backward()
        opt.step()
        report.step(step, loss.item(), t0, comm_ms() if comm_ms else None)
    # The trained model's loss on one fixed batch no step trained on, the same
    # for every run (every rank runs it: a sharded model's forward is collective).
    with torch.no_grad():
        x, y = batch(EVAL_SEED, 0, 2048)
        eval_loss = float(F.cross_entropy(model(x), y))
    report.end(eval_loss)
