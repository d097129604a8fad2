# SPDX-License-Identifier: Apache-2.0
"""DistributedDataParallel over grex: a small MLP, each rank its own batches,
gradients allreduced in buckets while backward runs. --hook adds one of
torch's DDP communication hooks (bf16 compression or PowerSGD), or grex's
own (grex-bf16, grex-fp16, grex-int8, grex-topk: the buckets travel grex's
ring as bf16, fp16 or int8, added in float32 at every hop, or as their top
1 %, all with error feedback and momentum correction; grex_torch/hooks.py). --deadline-ms D
averages each bucket over the ranks in within D ms (grex's deadline hook),
and --delay-ms T makes the last rank a straggler, T ms late every step.

    grex-run -n 4 -- python examples/torch/ddp.py
    torchrun --standalone --nproc_per_node 4 examples/torch/ddp.py --hook powersgd
    grex-run -n 2 -- python examples/torch/ddp.py --hook grex-bf16
    grex-run -n 2 -- python examples/torch/ddp.py --delay-ms 50 --deadline-ms 5
    torchrun --standalone --nproc_per_node 4 examples/torch/ddp.py --backend gloo    # the reference
"""
import time

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import common


class CommTimer:
    """Notes when each bucket's allreduce was in flight: the communication time
    of a step is the time at least one was (most of it overlaps backward)."""

    def __init__(self, world):
        self.world, self.spans = world, []

    def take_ms(self):
        busy, end = 0.0, float("-inf")
        for a, b in sorted(self.spans):
            busy += max(0.0, b - max(a, end))
            end = max(end, b)
        self.spans = []
        return busy * 1e3


def timed_allreduce(timer, bucket):
    """DDP's plain gradient averaging as a comm hook, timed by `timer`."""
    t0 = time.perf_counter()
    fut = dist.all_reduce(bucket.buffer().div_(timer.world), async_op=True).get_future()

    def done(f):
        timer.spans.append((t0, time.perf_counter()))
        return f.value()[0]
    return fut.then(done)


def main():
    hooks = "none, bf16, powersgd, grex-bf16, grex-fp16, grex-int8 or grex-topk"
    a = common.parse(__doc__, **{"--hook": (str, "none", hooks),
                                 "--deadline-ms": (int, 0, "grex's deadline hook: average each bucket over the "
                                                   "ranks in within this many ms (grex only; 0: off)"),
                                 "--delay-ms": (int, 0, "the last rank sleeps this long every step (a straggler)"),
                                 "--topk-fraction": (float, 0.01, "grex-topk: the share of each bucket's "
                                                     "values each rank sends"),
                                 "--momentum-correction": (int, 1, "grex's compressed hooks: 1 compresses "
                                                           "the velocity of train()'s momentum SGD (the "
                                                           "default), 0 the gradient"),
                                 "--topk-warmup": (int, 0, "grex-topk: the first this many steps send "
                                                   "from a quarter of each bucket down to the fraction")})
    rank, world = common.init(a.backend)
    # PowerSGD's hook issues its second allreduce from the first one's
    # callback; with several buckets those callbacks may run in a different
    # order on each rank, and a CPU backend, which runs collectives in issue
    # order (gloo and grex alike), then pairs different collectives. One
    # bucket keeps the order the same everywhere.
    # A deadline is waited for per bucket: one bucket waits once a step.
    bucket_mb = 1024 if a.hook == "powersgd" or a.deadline_ms > 0 else 25
    model = DDP(common.mlp(a.hidden, a.seed), bucket_cap_mb=bucket_mb)
    timer = None
    if a.hook == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif a.hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
        # Rank-2 approximation after 2 plain steps, the same seed on every rank.
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                       start_powerSGD_iter=2, random_seed=0)
        model.register_comm_hook(state, powersgd.powerSGD_hook)
    elif a.hook in ("grex-bf16", "grex-fp16", "grex-int8", "grex-topk"):  # grex's, with error feedback (grex only)
        import grex_torch.hooks
        # common.train steps with SGD, momentum 0.9: the hook corrects for it.
        momentum = common.MOMENTUM if a.momentum_correction else 0.0
        model.register_comm_hook(None, grex_torch.hooks.compressed_hook(a.hook[len("grex-"):],
                                                                        topk_fraction=a.topk_fraction,
                                                                        momentum=momentum,
                                                                        warmup_steps=a.topk_warmup))
    elif a.hook == "none" and a.deadline_ms > 0:  # grex's deadline hook: a straggler's late gradient is dropped
        import grex_torch.hooks
        model.register_comm_hook(None, grex_torch.hooks.deadline_hook(a.deadline_ms))
    elif a.hook == "none":
        timer = CommTimer(world)
        model.register_comm_hook(timer, timed_allreduce)
    else:
        raise SystemExit(f"--hook {a.hook}: {hooks}")
    common.train(model, a, rank, world, f"DDP (hook {a.hook})", batch_seed=rank,
                 comm_ms=timer.take_ms if timer else None, delay_ms=a.delay_ms)


if __name__ == "__main__":
    main()
