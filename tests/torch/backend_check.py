# SPDX-License-Identifier: Apache-2.0
"""One rank of the grex torch.distributed backend tests; run it under a launcher
(grex-run, torchrun, mpirun, srun) with the grex_torch package importable.

    backend_check.py collectives   every collective vs the gloo backend on the same tensors
    backend_check.py ddp STEPS     DistributedDataParallel on grex and on gloo: equal losses and weights

Prints "FAIL ..." for each failed check and "PASS <mode> on N ranks" at the end
on rank 0; the exit status is the number of failures (capped at 99).
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist

import grex_torch

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL rank {dist.get_rank()}: {what}", flush=True)


def same(a, b, what):
    if a.is_floating_point():
        # half and bfloat16: both sides round a float sum once; summation order may move it by one ulp
        rtol = {torch.half: 2e-3, torch.bfloat16: 1e-2}.get(a.dtype, 1e-6)
        ok = torch.allclose(a.double(), b.double(), rtol=rtol, atol=1e-9)
    else:
        ok = torch.equal(a, b)
    check(ok, f"{what}: grex {a.flatten()[:4].tolist()} vs reference {b.flatten()[:4].tolist()}")


def inputs(dtype, n, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.rand(n, generator=g, dtype=torch.float64) + 0.5).to(dtype)
    return torch.randint(1, 5, (n,), generator=g, dtype=torch.int64).to(dtype)


def collectives(rank, size, gloo):
    n = 1031  # prime, so no size divides it evenly by accident
    ops = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
           "MAX": dist.ReduceOp.MAX}
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8):
        for name, op in ops.items():
            if dtype == torch.uint8 and name in ("SUM", "PRODUCT"):
                continue  # overflow: wraps the same way, but gloo and grex need not agree on the order
            t = inputs(dtype, n, 100 + rank)
            ref = t.clone()
            dist.all_reduce(t, op=op)
            dist.all_reduce(ref, op=op, group=gloo)
            same(t, ref, f"all_reduce {dtype} {name}")
    for dtype in (torch.float16, torch.bfloat16):  # gloo reduces these too; grex in f32, rounded once
        t = inputs(dtype, n, 7 + rank)
        ref = t.float()
        dist.all_reduce(t)
        dist.all_reduce(ref, group=gloo)
        same(t, ref.to(dtype), f"all_reduce {dtype} SUM")
    t = inputs(torch.float32, n, 300 + rank)
    ref = t.clone()
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    dist.all_reduce(ref, group=gloo)
    same(t, ref / size, "all_reduce AVG (gloo: SUM / size)")

    for root in range(size):
        t = inputs(torch.float64, n, 500 + rank)
        ref = t.clone()
        dist.broadcast(t, src=root)
        dist.broadcast(ref, src=root, group=gloo)
        same(t, ref, f"broadcast from {root}")
        t = inputs(torch.int64, n, 600 + rank)
        ref = t.clone()
        dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
        dist.reduce(ref, dst=root, op=dist.ReduceOp.SUM, group=gloo)
        if rank == root:
            same(t, ref, f"reduce to {root}")

    t = inputs(torch.float32, n, 700 + rank)
    outs = [torch.empty(n) for _ in range(size)]
    refs = [torch.empty(n) for _ in range(size)]
    dist.all_gather(outs, t)
    dist.all_gather(refs, t, group=gloo)
    for r in range(size):
        same(outs[r], refs[r], f"all_gather block {r}")
    flat = torch.empty(size * n)
    dist.all_gather_into_tensor(flat, t)
    same(flat, torch.cat(refs), "all_gather_into_tensor")

    # reduce_scatter: the reference is gloo's allreduce of the concatenation, sliced.
    blocks = [inputs(torch.float64, n, 800 + rank * size + r) for r in range(size)]
    full = torch.cat(blocks)
    dist.all_reduce(full, group=gloo)
    want = full[rank * n:(rank + 1) * n]
    out = torch.empty(n, dtype=torch.float64)
    dist.reduce_scatter(out, blocks)
    same(out, want, "reduce_scatter")
    out2 = torch.empty(n, dtype=torch.float64)
    dist.reduce_scatter_tensor(out2, torch.cat(blocks))
    same(out2, want, "reduce_scatter_tensor")

    t = inputs(torch.int32, size * 97, 900 + rank)
    out = torch.empty_like(t)
    ref = torch.empty_like(t)
    dist.all_to_all_single(out, t)
    dist.all_to_all_single(ref, t, group=gloo)
    same(out, ref, "all_to_all_single")

    # Uneven splits (all_to_all_single with split sizes): rank r sends r + j + 1
    # rows of 3 to rank j, against gloo.
    in_splits = [rank + j + 1 for j in range(size)]
    out_splits = [j + rank + 1 for j in range(size)]
    t = inputs(torch.float32, sum(in_splits) * 3, 950 + rank).reshape(-1, 3)
    out = torch.empty(sum(out_splits), 3)
    ref = torch.empty(sum(out_splits), 3)
    w = dist.all_to_all_single(out, t, out_splits, in_splits, async_op=True)
    dist.all_to_all_single(ref, t, out_splits, in_splits, group=gloo)
    w.wait()
    same(out, ref, "all_to_all_single with uneven splits")

    dist.barrier()
    # send / recv around a ring.
    if size > 1:
        x = torch.full((5,), float(rank))
        got = torch.empty(5)
        if rank % 2 == 0:
            dist.send(x, (rank + 1) % size)
            dist.recv(got, (rank - 1) % size)
        else:
            dist.recv(got, (rank - 1) % size)
            dist.send(x, (rank + 1) % size)
        check(got[0].item() == float((rank - 1) % size), f"recv from the ring got {got[0].item()}")

    # 8 overlapping async allreduces (DDP's buckets), waited out of order.
    ts = [torch.full((10000,), float(k + rank)) for k in range(8)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    futs = [w.get_future() for w in works]
    for w in reversed(works):
        w.wait()
    for k, (t, w, f) in enumerate(zip(ts, works, futs)):
        check(w.is_completed() and w.is_success(), f"async allreduce {k} not completed")
        check(t[0].item() == size * k + size * (size - 1) / 2, f"async allreduce {k}: {t[0].item()}")
        check(torch.equal(f.wait()[0], t), f"async allreduce {k}: future value")

    # Unsupported requests fail loudly before anything moves.
    for what, fn in (("BAND", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BAND)),
                     ("int16", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16))),
                     ("splits not summing to the rows", lambda: dist.all_to_all_single(
                         torch.empty(size + 1), torch.ones(size + 1), [1] * size, [1] * size))):
        try:
            fn()
            check(False, f"{what} did not raise")
        except (RuntimeError, ValueError) as e:
            check("grex" in str(e), f"{what} raised without naming grex: {e}")
    dist.barrier()


def ddp_train(rank, steps, group):
    """DDP on examples/torch's model and data over `group` (None: the default, grex):
    this rank's losses and the trained model."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "torch"))
    import common  # noqa: E402  (the examples' model and data)
    model = common.mlp(256)
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(steps):
        x, y = common.batch(rank, step, 64)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def ddp(rank, size, steps, gloo):
    grex_losses, grex_model = ddp_train(rank, steps, None)
    gloo_losses, gloo_model = ddp_train(rank, steps, gloo)
    for s, (a, b) in enumerate(zip(grex_losses, gloo_losses)):
        check(abs(a - b) <= 1e-5 * max(1.0, abs(b)), f"step {s}: loss {a} on grex vs {b} on gloo")
    for (name, p), q in zip(grex_model.named_parameters(), gloo_model.parameters()):
        check(torch.allclose(p, q, rtol=1e-5, atol=1e-6), f"parameter {name} differs after {steps} steps")
    check(len(grex_losses) == steps, f"{len(grex_losses)} steps")
    if rank == 0:
        print(f"ddp: {steps} steps, loss {grex_losses[0]:.5f} -> {grex_losses[-1]:.5f} on grex, "
              f"{gloo_losses[0]:.5f} -> {gloo_losses[-1]:.5f} on gloo", flush=True)


def main():
    mode = sys.argv[1]
    timeout = datetime.timedelta(seconds=120)
    rank, size = grex_torch.init_from_env(timeout=timeout)
    check(dist.get_backend() == "grex", f"default backend is {dist.get_backend()}")
    if mode == "collectives":
        collectives(rank, size, dist.new_group(backend="gloo"))
    elif mode == "ddp":
        ddp(rank, size, int(sys.argv[2]), dist.new_group(backend="gloo"))
    else:
        raise SystemExit(f"unknown mode {mode}")
    dist.barrier()
    dist.destroy_process_group()
    if failures == 0 and rank == 0:
        print(f"PASS {mode} on {size} ranks", flush=True)
    sys.stdout.flush()
    os._exit(min(failures, 99))


if __name__ == "__main__":
    main()
