# SPDX-License-Identifier: Apache-2.0
"""grex_torch on CUDA tensors, on a real GPU (tests/gpu/device-check.sh runs it
under torchrun, every rank on GPU 0).

Checks, against values computed on the host (small integers: exact in any
reduction order): all_reduce (SUM, AVG, MAX, PREMUL_SUM; f32, bf16, i64) on
the default stream, on a side stream with work queued after it, and with
async_op; broadcast, reduce, all_gather (list and into_tensor),
reduce_scatter (list and tensor), all_to_all_single with even and uneven
splits, all_to_all (lists), gather, scatter, send/recv, recv without src and
batch_isend_irecv around the ring with the payload written just before by
queued GPU work. Then DDP
on CUDA trains 20 steps over grex and over gloo (same model, data and seed)
and the losses must agree; then, with --bench, all_reduce of 4 and 64 MiB over
grex against gloo on the same CUDA tensors (median of 7, min-max).
"""
import statistics
import sys
import time

import torch
import torch.distributed as dist

import grex_torch  # noqa: F401  (registers "grex")


def main():
    bench = "--bench" in sys.argv
    dist.init_process_group("grex")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    failures = []

    def check(name, got, want):
        got, want = got.detach().cpu(), want.detach().cpu()
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            bad = (got != want).nonzero()
            where = bad[0].tolist() if len(bad) else "shape/dtype"
            failures.append(f"{name}: differs at {where}")

    def pattern(n, r, dtype=torch.float32):
        return ((torch.arange(n) % 5 + 1) * (r + 1)).to(dtype)

    n = 3_000_001
    total = sum(range(1, world + 1))
    # all_reduce SUM f32 on the default stream, behind queued work.
    x = pattern(n, rank).to(dev)
    torch.cuda._sleep(50_000_000)  # ~tens of ms of GPU time queued before the collective
    x.mul_(1)
    dist.all_reduce(x)
    check("all_reduce sum f32", x, pattern(n, 0) * total)
    # On a side stream, work queued after the collective sees its result.
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = pattern(n, rank, torch.bfloat16).to(dev)
        dist.all_reduce(y, op=dist.ReduceOp.MAX)
        y2 = y * 2
    s.synchronize()
    check("all_reduce max bf16 on a side stream", y2, pattern(n, world - 1, torch.bfloat16) * 2)
    # async_op, AVG (i64 has no AVG in torch: f32), PREMUL_SUM
    z = pattern(1000, rank).to(dev) * world
    w = dist.all_reduce(z, op=dist.ReduceOp.AVG, async_op=True)
    w.wait()
    check("all_reduce avg async", z, pattern(1000, 0) * total)
    i = pattern(1001, rank, torch.int64).to(dev)
    dist.all_reduce(i)
    check("all_reduce sum i64", i, pattern(1001, 0, torch.int64) * total)
    p = pattern(999, rank).to(dev)
    dist.all_reduce(p, op=dist._make_nccl_premul_sum(2.0))
    check("all_reduce premul_sum", p, pattern(999, 0) * total * 2)
    # broadcast from the last rank, reduce to rank 0
    b = pattern(4097, rank).to(dev)
    dist.broadcast(b, src=world - 1)
    check("broadcast", b, pattern(4097, world - 1))
    r = pattern(5000, rank).to(dev)
    dist.reduce(r, dst=0)
    check("reduce", r, pattern(5000, 0) * total if rank == 0 else pattern(5000, rank))
    # all_gather, list and into_tensor
    g_in = pattern(777, rank).to(dev)
    g_list = [torch.empty(777, device=dev) for _ in range(world)]
    dist.all_gather(g_list, g_in)
    for q in range(world):
        check(f"all_gather[{q}]", g_list[q], pattern(777, q))
    g_flat = torch.empty(777 * world, device=dev)
    dist.all_gather_into_tensor(g_flat, g_in)
    check("all_gather_into_tensor", g_flat, torch.cat([pattern(777, q) for q in range(world)]))
    # reduce_scatter, tensor and list
    rs_in = torch.cat([pattern(640, q) for q in range(world)]).to(dev)
    rs_out = torch.empty(640, device=dev)
    dist.reduce_scatter_tensor(rs_out, rs_in)
    check("reduce_scatter_tensor", rs_out, pattern(640, rank) * world)
    rs_list = [pattern(300, q).to(dev) for q in range(world)]
    rs_one = torch.empty(300, device=dev)
    dist.reduce_scatter(rs_one, rs_list)
    check("reduce_scatter", rs_one, pattern(300, rank) * world)
    # all_to_all_single, even splits: block j of rank i goes to block i of rank j
    a_in = torch.cat([torch.full((100,), float(rank * 10 + j)) for j in range(world)]).to(dev)
    a_out = torch.empty(100 * world, device=dev)
    dist.all_to_all_single(a_out, a_in)
    check("all_to_all_single", a_out, torch.cat([torch.full((100,), float(j * 10 + rank)) for j in range(world)]))
    # gather and scatter (root 0, then the last rank)
    ga_out = [torch.empty(333, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(pattern(333, rank).to(dev), ga_out, dst=0)
    if rank == 0:
        for q in range(world):
            check(f"gather[{q}]", ga_out[q], pattern(333, q))
    sc_out = torch.empty(555, device=dev)
    root = world - 1
    dist.scatter(sc_out, [pattern(555, q).to(dev) for q in range(world)] if rank == root else None, src=root)
    check("scatter", sc_out, pattern(555, rank))
    # all_to_all (lists) and all_to_all_single with uneven splits: rank i
    # sends i + j + 1 rows of 3 to rank j, each row holding 100 * i + j.
    l_in = [torch.full((50,), float(rank * 10 + j), device=dev) for j in range(world)]
    l_out = [torch.empty(50, device=dev) for _ in range(world)]
    dist.all_to_all(l_out, l_in)
    for j in range(world):
        check(f"all_to_all[{j}]", l_out[j], torch.full((50,), float(j * 10 + rank)))
    in_splits = [rank + j + 1 for j in range(world)]
    out_splits = [j + rank + 1 for j in range(world)]
    u_in = torch.cat([torch.full((in_splits[j], 3), float(100 * rank + j)) for j in range(world)]).to(dev)
    u_out = torch.empty(sum(out_splits), 3, device=dev)
    dist.all_to_all_single(u_out, u_in, out_splits, in_splits)
    check("all_to_all_single uneven", u_out,
          torch.cat([torch.full((out_splits[j], 3), float(100 * j + rank)) for j in range(world)]))
    # send and recv around the ring; the payload is written by a kernel queued
    # behind GPU work just before the send, and read by one after the wait.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    payload = torch.zeros(1 << 20, device=dev)
    torch.cuda._sleep(20_000_000)
    payload.add_(pattern(1 << 20, rank))
    got = torch.empty(1 << 20, device=dev)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, payload, nxt), dist.P2POp(dist.irecv, got, prv)])
    for q in reqs:
        q.wait()
    check("batch_isend_irecv ring", got * 1, pattern(1 << 20, prv))
    if rank == 0:
        dist.send(pattern(4096, 7, torch.bfloat16).to(dev), dst=world - 1, tag=5)
    elif rank == world - 1:
        b16 = torch.empty(4096, dtype=torch.bfloat16, device=dev)
        dist.recv(b16, src=0, tag=5)
        check("send/recv bf16 with a tag", b16, pattern(4096, 7, torch.bfloat16))
    dist.barrier()
    # recv without src into a CUDA tensor: the sender is named.
    if rank == world - 1:
        dist.send(pattern(1000, 9).to(dev), dst=0, tag=6)
    elif rank == 0:
        anyt = torch.empty(1000, device=dev)
        src = dist.recv(anyt, tag=6)
        check("recv without src (CUDA)", anyt, pattern(1000, 9))
        if src != world - 1:
            failures.append(f"recv without src: source {src}, expected {world - 1}")
    dist.barrier()

    # DDP on CUDA: grex against gloo, same model, data and seed.
    gloo = dist.new_group(backend="gloo")
    losses = {}
    for name, group in (("grex", None), ("gloo", gloo)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).to(dev)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0], process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(100 + rank)
        out = []
        for _ in range(20):
            xb = torch.randn(32, 64, generator=gen).to(dev)
            yb = torch.randn(32, 8, generator=gen).to(dev)
            loss = torch.nn.functional.mse_loss(ddp(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        losses[name] = out
    worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(losses["grex"], losses["gloo"]))
    if worst > 1e-5:
        failures.append(f"DDP on CUDA: grex and gloo losses differ by {worst:.2e} (relative)")
    if rank == 0:
        print(f"ddp cuda 20 steps: grex loss {losses['grex'][0]:.6f} -> {losses['grex'][-1]:.6f}, gloo "
              f"{losses['gloo'][0]:.6f} -> {losses['gloo'][-1]:.6f}, worst relative difference {worst:.1e}",
              flush=True)

    if bench:
        for mib in (4, 64):
            t = torch.ones(mib << 18, device=dev)
            times = {"grex": [], "gloo": []}
            for it in range(9):
                for name, group in (("grex", None), ("gloo", gloo)):
                    dist.barrier()
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    dist.all_reduce(t, group=group)
                    torch.cuda.synchronize()
                    if it >= 2:
                        times[name].append((time.perf_counter() - t0) * 1e6)
            if rank == 0:
                g, o = times["grex"], times["gloo"]
                print(f"bench all_reduce cuda f32 {mib} MiB, {world} ranks: grex {statistics.median(g):.0f} us "
                      f"({min(g):.0f}-{max(g):.0f}), gloo {statistics.median(o):.0f} us ({min(o):.0f}-{max(o):.0f}), "
                      f"grex/gloo {statistics.median(g) / statistics.median(o):.2f}", flush=True)

    ok = torch.tensor([len(failures)], dtype=torch.int64)
    dist.all_reduce(ok)  # CPU tensor: every rank agrees on the outcome
    for f in failures:
        print(f"rank {rank}: FAIL {f}", flush=True)
    if rank == 0:
        print(("PASS" if ok.item() == 0 else "FAIL") + f": grex_torch on CUDA tensors, {world} ranks", flush=True)
    dist.destroy_process_group()
    return 0 if ok.item() == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
