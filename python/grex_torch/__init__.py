# SPDX-License-Identifier: Apache-2.0
"""grex as a torch.distributed backend.

    import grex_torch                      # registers the backend "grex"
    import torch.distributed as dist
    dist.init_process_group("grex")        # under torchrun, grex-run, mpirun (+ MASTER_ADDR/PORT) or srun

CPU tensors of float, double, half, bfloat16, int32, int64 and uint8; SUM,
AVG, PRODUCT, MIN and MAX; allreduce, broadcast, reduce, allgather (and
_allgather_base), reduce_scatter (and _reduce_scatter_base), alltoall_base
with equal splits, barrier, send and recv. Every collective is asynchronous
and completes in issue order; the group's timeout bounds each one.
"""
import torch  # noqa: F401  (loads libtorch and its Python types first)
import torch.distributed as dist

try:
    from . import _grex_torch as _ext
except ImportError:  # the build tree: the extension sits beside this package
    import _grex_torch as _ext

__all__ = ["create_process_group", "BACKEND"]

BACKEND = "grex"


def create_process_group(store, rank, size, timeout):
    """torch.distributed's backend creator: a grex ProcessGroup over torch's store."""
    return _ext.create_process_group(store, rank, size, timeout)


if not hasattr(dist.Backend, BACKEND.upper()):
    dist.Backend.register_backend(BACKEND, create_process_group)
