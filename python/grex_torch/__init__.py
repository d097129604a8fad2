# SPDX-License-Identifier: Apache-2.0
"""grex as a torch.distributed backend.

    import grex_torch                      # registers the backend "grex"
    import torch.distributed as dist
    dist.init_process_group("grex")        # under torchrun, grex-run, mpirun (+ MASTER_ADDR/PORT) or srun

A torch 2 c10d.Backend (torch 2.4 and later) registered for the devices
"cpu" and "cuda". CUDA tensors go on torch's current stream for every
collective (gather, scatter and the all_to_all forms through host memory);
send and recv of a CUDA tensor copy it through host memory, the send once the
work queued on its stream is done, the receive before its Work completes.
CPU tensors of float, double, half, bfloat16, int32, int64 and uint8; SUM,
AVG, PRODUCT, MIN, MAX and PREMUL_SUM. Every collective torch sends a
backend (allreduce and its coalesced form, reduce, broadcast, allgather,
all_gather_into_tensor and its coalesced form, reduce_scatter,
reduce_scatter_tensor and its coalesced form, alltoall, all_to_all_single with
uneven splits, gather, scatter, barrier) is asynchronous and completes in
issue order; send, recv and batch_isend_irecv run on their own channel per
peer and direction. recv without a source is not supported. The group's
timeout bounds each operation; errors name the rank that raised them.
"""
import torch  # noqa: F401  (loads libtorch and its Python types first)
import torch.distributed as dist

try:
    # Loads libgrex first where the grex package finds it (a wheel carries it
    # beside grex/), so the extension binds to that same copy by its soname.
    import grex as _grex  # noqa: F401
except ImportError:  # the build tree: the extension finds libgrex through its rpath
    pass

try:
    from . import _grex_torch as _ext
except ImportError:  # the build tree: the extension sits beside this package
    import _grex_torch as _ext

import datetime
import os

__all__ = ["create_backend", "init_from_env", "BACKEND"]

BACKEND = "grex"


def create_backend(dist_opts, backend_opts=None):
    """torch.distributed's backend creator (extended API): a grex Backend for
    one group, over the store torch gives that group."""
    return _ext.create_backend(dist_opts.store, dist_opts.group_rank, dist_opts.group_size,
                               dist_opts.timeout, str(dist_opts.group_id or ""))


def _launcher_env():
    """(rank, world size, launcher) from torchrun / grex-run, Open MPI or Slurm variables."""
    for rank_var, size_var, name in (("RANK", "WORLD_SIZE", "torchrun"),
                                     ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "openmpi"),
                                     ("SLURM_PROCID", "SLURM_NTASKS", "slurm")):
        if rank_var in os.environ:
            if size_var not in os.environ:
                raise RuntimeError(f"grex_torch: {rank_var} is set but {size_var} is not")
            return int(os.environ[rank_var]), int(os.environ[size_var]), name
    raise RuntimeError("grex_torch: no launcher environment (RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, "
                       "SLURM_PROCID/SLURM_NTASKS); use torchrun, grex-run, mpirun or srun")


def init_from_env(timeout=datetime.timedelta(minutes=5), backend=BACKEND):
    """dist.init_process_group for any launcher grex knows.

    torchrun and grex-run set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT;
    under mpirun or srun the rank and size come from Open MPI's or Slurm's
    variables, and the store from MASTER_ADDR / MASTER_PORT (defaults
    127.0.0.1:29500, so set MASTER_ADDR to the first host across hosts).
    Returns (rank, world size).
    """
    rank, size, _ = _launcher_env()
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = os.environ.get("MASTER_PORT", "29500")
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=rank, world_size=size,
                            timeout=timeout)
    return rank, size


if not hasattr(dist.Backend, BACKEND.upper()):
    dist.Backend.register_backend(BACKEND, create_backend, extended_api=True, devices=["cpu", "cuda"])
