# SPDX-License-Identifier: Apache-2.0
"""DDP communication hooks on grex's compressed allreduce (issue 29).

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


def compressed_hook(compression="bf16", error_feedback=True):
    """A hook for DistributedDataParallel.register_comm_hook."""
    if compression not in ("bf16", "fp16", "int8", "topk"):
        raise ValueError(f"grex_torch.hooks: compression {compression!r}: bf16, fp16, int8 or topk (1 %)")

    def hook(state, bucket):
        group = state if state is not None else dist.group.WORLD
        backend = group._get_backend(torch.device("cpu"))
        if not hasattr(backend, "compressed_allreduce"):
            raise RuntimeError(f"grex_torch.hooks: the group's CPU backend is {type(backend).__name__}, not grex")
        work = backend.compressed_allreduce(bucket.buffer(), compression, error_feedback, bucket.index())
        return work.get_future().then(lambda fut: fut.value()[0])

    return hook
