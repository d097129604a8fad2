# SPDX-License-Identifier: Apache-2.0
"""Tensor parallelism over grex with DTensor: the MLP's first Linear split by
columns and its second by rows (Megatron's pairing: one allreduce of the
activations forward and one of their gradients backward), the last layer
replicated. Every rank sees the same batch; the weights are what is split.

    grex-run -n 2 -- python examples/torch/tensor_parallel.py
    torchrun --standalone --nproc_per_node 4 examples/torch/tensor_parallel.py
    torchrun --standalone --nproc_per_node 4 examples/torch/tensor_parallel.py --backend gloo   # the reference
"""
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import common


def main():
    a = common.parse(__doc__)
    rank, world = common.init(a.backend)
    if a.hidden % world:
        raise SystemExit(f"--hidden {a.hidden} must split evenly over {world} ranks")
    mesh = init_device_mesh("cpu", (world,))
    model = parallelize_module(common.mlp(a.hidden, a.seed), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    common.train(model, a, rank, world, "tensor parallel (DTensor)", batch_seed=0)  # the same batch on every rank


if __name__ == "__main__":
    main()
