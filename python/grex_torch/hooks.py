# SPDX-License-Identifier: Apache-2.0
"""DDP communication hooks on grex's compressed and deadline allreduces (issue 29).

    import grex_torch.hooks
    model.register_comm_hook(None, grex_torch.hooks.compressed_hook("bf16"))

Unlike torch's bf16_compress_hook, which rounds the bucket once and then
runs a plain allreduce of 16-bit values (every hop adds in bf16), grex rounds
inside its ring: the partial sums travel as 16-bit floats and are added in
float32 at every hop, and with error feedback (the default) each rank's
rounding error is kept per bucket and added to its next gradient. The
bucket is averaged in place. float32 gradients on the CPU, a group whose
CPU backend is grex (state: the process group, or None for the default).
"""
import torch
import torch.distributed as dist


def compressed_hook(compression="bf16", error_feedback=True, topk_fraction=0.01):
    """A hook for DistributedDataParallel.register_comm_hook. topk: each rank
    sends the largest topk_fraction of each bucket's values."""
    if compression not in ("bf16", "fp16", "int8", "topk"):
        raise ValueError(f"grex_torch.hooks: compression {compression!r}: bf16, fp16, int8 or topk")
    if not 0.0 < topk_fraction <= 1.0:
        raise ValueError(f"grex_torch.hooks: topk_fraction {topk_fraction}: not in (0, 1]")

    def hook(state, bucket):
        group = state if state is not None else dist.group.WORLD
        backend = group._get_backend(torch.device("cpu"))
        if not hasattr(backend, "compressed_allreduce"):
            raise RuntimeError(f"grex_torch.hooks: the group's CPU backend is {type(backend).__name__}, not grex")
        work = backend.compressed_allreduce(bucket.buffer(), compression, error_feedback, bucket.index(),
                                            topk_fraction)
        return work.get_future().then(lambda fut: fut.value()[0])

    return hook


def deadline_hook(deadline_ms, late="drop"):
    """A hook that averages each bucket over the ranks whose gradients are in
    within deadline_ms of a rank's own entry, so a straggler does not hold the
    others back: every rank gets the same average (of the contributors) and
    takes the same step; the straggler's gradient is dropped, or with
    late="carry" added into its next step's. Gradients on the CPU, a group
    whose CPU backend is grex (state: the process group, or None).
    hook.contributors: the contributor count of each call, newest last."""
    if late not in ("drop", "carry"):
        raise ValueError(f"grex_torch.hooks: late {late!r}: drop or carry")
    counts = []

    def hook(state, bucket):
        group = state if state is not None else dist.group.WORLD
        backend = group._get_backend(torch.device("cpu"))
        if not hasattr(backend, "deadline_allreduce"):
            raise RuntimeError(f"grex_torch.hooks: the group's CPU backend is {type(backend).__name__}, not grex")
        mask = torch.zeros(group.size(), dtype=torch.int32)
        work = backend.deadline_allreduce(bucket.buffer(), deadline_ms, late == "carry", bucket.index(), mask)

        def done(fut):
            counts.append(int(mask.sum()))
            return fut.value()[0]
        return work.get_future().then(done)

    hook.contributors = counts
    return hook
