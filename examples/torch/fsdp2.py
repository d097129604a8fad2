# SPDX-License-Identifier: Apache-2.0
"""FSDP2 over grex: every Linear's parameters sharded across the ranks with
torch.distributed.fsdp.fully_shard; forward gathers them
(all_gather_into_tensor), backward reduce-scatters the gradients
(reduce_scatter_tensor). Each rank trains on its own batches.

    grex-run -n 2 -- python examples/torch/fsdp2.py
    torchrun --standalone --nproc_per_node 4 examples/torch/fsdp2.py
    torchrun --standalone --nproc_per_node 4 examples/torch/fsdp2.py --backend gloo   # the reference
"""
import torch
from torch.distributed.device_mesh import init_device_mesh

try:
    from torch.distributed.fsdp import fully_shard  # torch 2.6 and later
except ImportError:
    from torch.distributed._composable.fsdp import fully_shard  # torch 2.4 and 2.5

import common


def main():
    a = common.parse(__doc__)
    rank, world = common.init(a.backend)
    mesh = init_device_mesh("cpu", (world,))
    model = common.mlp(a.hidden, a.seed)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    common.train(model, a, rank, world, "FSDP2", batch_seed=rank)


if __name__ == "__main__":
    main()
