# SPDX-License-Identifier: Apache-2.0
"""The checks of torch2_worker.py: every operation of the grex backend against
gloo's result on the same tensors, each recorded by name in `results`."""
import datetime
import time
import traceback
import warnings

import torch
import torch.distributed as dist

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8)
results = {}


def check(name, fn, *args):
    """Runs one check; it returns None (passed) or "skip: <reason>" where this machine cannot run it."""
    try:
        skipped = fn(*args)
        results[name] = skipped or "ok"
    except Exception as e:  # noqa: BLE001  (every failure is reported by name)
        results[name] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"


def same(got, want, what):
    if got.is_floating_point():
        tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5}.get(got.dtype, 1e-12)
        ok = torch.allclose(got.double(), want.double(), rtol=tol, atol=tol)
    else:
        ok = torch.equal(got, want)
    assert ok, f"{what}: grex {got.flatten()[:6].tolist()} vs gloo {want.flatten()[:6].tolist()}"


def data(dtype, n, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.rand(n, generator=g, dtype=torch.float64) + 0.5).to(dtype)
    return torch.randint(1, 5, (n,), generator=g, dtype=torch.int64).to(dtype)


def gloo_reduce_ref(t, op, gloo):
    """gloo's allreduce of t (in f32 where gloo lacks the dtype), as t's dtype."""
    ref = t.clone()
    try:
        dist.all_reduce(ref, op=op, group=gloo)
        return ref
    except RuntimeError:
        ref = t.float()
        dist.all_reduce(ref, op=op, group=gloo)
        return ref.to(t.dtype)


def allreduce_ops(rank, size, gloo):
    n = 257
    for dtype in DTYPES:
        ops = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
               "MAX": dist.ReduceOp.MAX}
        for name, op in ops.items():
            def one(dtype=dtype, op=op, name=name):
                t = data(dtype, n, 10 * rank + 1)
                ref = gloo_reduce_ref(t, op, gloo)
                dist.all_reduce(t, op=op)
                same(t, ref, f"all_reduce {dtype} {name}")
            check(f"all_reduce {dtype} {name}", one)
        if dtype.is_floating_point:
            def avg(dtype=dtype):
                t = data(dtype, n, 20 + rank)
                ref = t.double().clone()  # .double() of an f64 tensor is the tensor itself
                dist.all_reduce(ref, group=gloo)
                dist.all_reduce(t, op=dist.ReduceOp.AVG)
                same(t, (ref / size).to(dtype), f"all_reduce {dtype} AVG")
            check(f"all_reduce {dtype} AVG", avg)

            def premul(dtype=dtype):
                t = data(dtype, n, 30 + rank)
                ref = (t.double() * 0.5)
                dist.all_reduce(ref, group=gloo)
                dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
                same(t, ref.to(dtype), f"all_reduce {dtype} PREMUL_SUM")
            check(f"all_reduce {dtype} PREMUL_SUM", premul)


def rooted_ops(rank, size, gloo):
    n = 101
    for root in range(size):
        for dtype in DTYPES:
            def bcast(dtype=dtype, root=root):
                t = data(dtype, n, 40 + rank)
                ref = t.clone()
                dist.broadcast(ref, src=root, group=gloo)
                dist.broadcast(t, src=root)
                same(t, ref, f"broadcast {dtype} from {root}")
            check(f"broadcast {dtype} root {root}", bcast)

            def red(dtype=dtype, root=root):
                t = data(dtype, n, 50 + rank)
                ref = gloo_reduce_ref(t, dist.ReduceOp.MAX, gloo)
                dist.reduce(t, dst=root, op=dist.ReduceOp.MAX)
                if rank == root:
                    same(t, ref, f"reduce MAX {dtype} to {root}")
            check(f"reduce {dtype} root {root}", red)

        def gather(root=root):
            t = data(torch.int64, n, 60 + rank)
            outs = [torch.empty_like(t) for _ in range(size)] if rank == root else None
            refs = [torch.empty_like(t) for _ in range(size)] if rank == root else None
            dist.gather(t, outs, dst=root)
            dist.gather(t, refs, dst=root, group=gloo)
            if rank == root:
                for r in range(size):
                    same(outs[r], refs[r], f"gather block {r} to {root}")
        check(f"gather root {root}", gather)

        def scatter(root=root):
            ins = [data(torch.float32, n, 70 + r) for r in range(size)] if rank == root else None
            out, ref = torch.empty(n), torch.empty(n)
            dist.scatter(out, ins, src=root)
            dist.scatter(ref, ins, src=root, group=gloo)
            same(out, ref, f"scatter from {root}")
        check(f"scatter root {root}", scatter)


def gather_scatter_ops(rank, size, gloo):
    n = 97
    for dtype in DTYPES:
        def allgather(dtype=dtype):
            t = data(dtype, n, 80 + rank)
            outs = [torch.empty_like(t) for _ in range(size)]
            refs = [torch.empty_like(t) for _ in range(size)]
            dist.all_gather(outs, t)
            dist.all_gather(refs, t, group=gloo)
            for r in range(size):
                same(outs[r], refs[r], f"all_gather {dtype} block {r}")
            flat = torch.empty(size * n, dtype=dtype)
            dist.all_gather_into_tensor(flat, t)
            same(flat, torch.cat(refs), f"all_gather_into_tensor {dtype}")
        check(f"all_gather {dtype}", allgather)

        def reduce_scatter(dtype=dtype):
            blocks = [data(dtype, n, 90 + rank * size + r) for r in range(size)]
            full = gloo_reduce_ref(torch.cat(blocks), dist.ReduceOp.SUM, gloo)
            want = full[rank * n:(rank + 1) * n]
            out = torch.empty(n, dtype=dtype)
            dist.reduce_scatter(out, blocks)
            same(out, want, f"reduce_scatter {dtype}")
            out2 = torch.empty(n, dtype=dtype)
            dist.reduce_scatter_tensor(out2, torch.cat(blocks))
            same(out2, want, f"reduce_scatter_tensor {dtype}")
            if dtype.is_floating_point:  # PREMUL_SUM with a tensor factor scales a copy of the input
                full_in = torch.cat(blocks)
                kept = full_in.clone()
                dist.reduce_scatter_tensor(out2, full_in, op=dist._make_nccl_premul_sum(torch.tensor(2.0, dtype=dtype)))
                same(out2, want * 2, f"reduce_scatter_tensor {dtype} PREMUL_SUM")
                assert torch.equal(full_in, kept), "PREMUL_SUM changed reduce_scatter_tensor's input"
        check(f"reduce_scatter {dtype}", reduce_scatter)


def alltoall_ops(rank, size, gloo):
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.uint8):
        def even(dtype=dtype):
            t = data(dtype, size * 13, 100 + rank)
            out, ref = torch.empty_like(t), torch.empty_like(t)
            dist.all_to_all_single(out, t)
            dist.all_to_all_single(ref, t, group=gloo)
            same(out, ref, f"all_to_all_single {dtype}")
            dist.all_to_all_single(t, t)  # in place
            same(t, ref, f"all_to_all_single {dtype} in place")
        check(f"all_to_all_single {dtype}", even)

    def uneven():
        # rank r sends r + j rows of 3 to rank j (some empty), against gloo
        ins = [rank + j for j in range(size)]
        outs = [j + rank for j in range(size)]
        t = data(torch.float64, sum(ins) * 3, 110 + rank).reshape(-1, 3)
        out, ref = torch.empty(sum(outs), 3, dtype=torch.float64), torch.empty(sum(outs), 3, dtype=torch.float64)
        w = dist.all_to_all_single(out, t, outs, ins, async_op=True)
        dist.all_to_all_single(ref, t, outs, ins, group=gloo)
        w.wait()
        same(out, ref, "all_to_all_single with uneven splits")
    check("all_to_all_single uneven", uneven)

    def lists():
        # gloo has no list alltoall: block j comes from rank j's seeded data
        ins = [data(torch.int32, rank + j + 1, 120 + rank * size + j) for j in range(size)]
        outs = [torch.empty(j + rank + 1, dtype=torch.int32) for j in range(size)]
        dist.all_to_all(outs, ins)
        for j in range(size):
            same(outs[j], data(torch.int32, j + rank + 1, 120 + j * size + rank), f"all_to_all block {j}")
    check("all_to_all uneven lists", lists)


def coalesced_ops(rank, size, gloo):
    def allreduce():
        ts = [data(torch.float32, 50 + k, 130 + rank + k) for k in range(3)]
        refs = [gloo_reduce_ref(t, dist.ReduceOp.SUM, gloo) for t in ts]
        with dist._coalescing_manager(async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t)
        cm.wait()
        for t, ref in zip(ts, refs):
            same(t, ref, "coalesced all_reduce")
    check("coalesced all_reduce", allreduce)

    def allgather():
        ins = [data(torch.float64, 20 + k, 140 + rank + k) for k in range(3)]
        outs = [torch.empty(size * t.numel(), dtype=t.dtype) for t in ins]
        with dist._coalescing_manager():
            for o, t in zip(outs, ins):
                dist.all_gather_into_tensor(o, t)
        for o, t in zip(outs, ins):
            refs = [torch.empty_like(t) for _ in range(size)]
            dist.all_gather(refs, t, group=gloo)
            same(o, torch.cat(refs), "coalesced all_gather_into_tensor")
    check("coalesced all_gather_into_tensor", allgather)

    def allgather_lists():
        ins = [data(torch.int64, 5 + k, 145 + rank + k) for k in range(2)]
        outs = [[torch.empty_like(t) for t in ins] for _ in range(size)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # all_gather_coalesced is deprecated in torch 2
            dist.all_gather_coalesced(outs, ins)
        for k, t in enumerate(ins):
            refs = [torch.empty_like(t) for _ in range(size)]
            dist.all_gather(refs, t, group=gloo)
            for r in range(size):
                same(outs[r][k], refs[r], f"all_gather_coalesced: rank {r}'s tensor {k}")
    check("all_gather_coalesced", allgather_lists)

    def reduce_scatter():
        ins = [data(torch.float32, size * (10 + k), 150 + rank + k) for k in range(3)]
        outs = [torch.empty(t.numel() // size) for t in ins]
        with dist._coalescing_manager():
            for o, t in zip(outs, ins):
                dist.reduce_scatter_tensor(o, t)
        for o, t in zip(outs, ins):
            full = gloo_reduce_ref(t, dist.ReduceOp.SUM, gloo)
            m = o.numel()
            same(o, full[rank * m:(rank + 1) * m], "coalesced reduce_scatter_tensor")
    check("coalesced reduce_scatter_tensor", reduce_scatter)


def p2p_ops(rank, size, gloo):
    right, left = (rank + 1) % size, (rank - 1) % size

    def isend_first():
        # every rank posts its send before its receive: must not deadlock, even for 4 MiB
        x = torch.full((1 << 20,), float(rank))
        y = torch.empty(1 << 20)
        s = dist.isend(x, right)
        r = dist.irecv(y, left)
        s.wait()
        r.wait()
        assert torch.all(y == float(left)), f"received {y[:3].tolist()} from rank {left}"
    check("isend then irecv around the ring", isend_first)

    def batch():
        x = data(torch.int64, 33, 160 + rank)
        y = torch.empty(33, dtype=torch.int64)
        x2, y2 = x * 2, torch.empty(33, dtype=torch.int64)
        ops = [dist.P2POp(dist.isend, x, right), dist.P2POp(dist.irecv, y, left),
               dist.P2POp(dist.isend, x2, left), dist.P2POp(dist.irecv, y2, right)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same(y, data(torch.int64, 33, 160 + left), "batch_isend_irecv from the left")
        same(y2, data(torch.int64, 33, 160 + right) * 2, "batch_isend_irecv from the right")
    check("batch_isend_irecv", batch)

    def blocking():
        x = torch.full((7,), float(rank), dtype=torch.float16)
        y = torch.empty(7, dtype=torch.float16)
        if rank % 2 == 0:
            dist.send(x, right)
            dist.recv(y, left)
        else:
            dist.recv(y, left)
            dist.send(x, right)
        assert torch.all(y == float(left)), f"recv got {y.tolist()}"
    check("send and recv", blocking)

    def anysource():
        # Every other rank sends to rank 0, which takes them in whatever order
        # they come: each sender once, with its bytes.
        n = 1000 + 37
        if rank != 0:
            dist.send(data(torch.float32, n, 300 + rank), 0, tag=3)
        else:
            seen = set()
            for _ in range(size - 1):
                y = torch.empty(n)
                src = dist.recv(y, tag=3)
                assert 0 < src < size and src not in seen, f"source {src} (seen {sorted(seen)})"
                seen.add(src)
                same(y, data(torch.float32, n, 300 + src), f"recv without src from rank {src}")
        # irecv without src: the Work names its source.
        if rank == size - 1:
            dist.send(torch.full((3,), 7.0, dtype=torch.float64), 0, tag=4)
        elif rank == 0:
            y = torch.empty(3, dtype=torch.float64)
            w = dist.irecv(y, tag=4)
            w.wait()
            assert w._source_rank() == size - 1 and torch.all(y == 7.0), (w._source_rank(), y.tolist())
        # One tag, two messages from rank 1: recv(src=1) takes the first,
        # recv without src the second.
        if rank == 1:
            for v in (11, 22):
                dist.send(torch.tensor([v], dtype=torch.int32), 0, tag=5)
        elif rank == 0:
            a, b = torch.empty(1, dtype=torch.int32), torch.empty(1, dtype=torch.int32)
            dist.recv(a, 1, tag=5)
            src = dist.recv(b, tag=5)
            assert (src, int(a), int(b)) == (1, 11, 22), (src, int(a), int(b))
        dist.barrier()
    check("recv without src (recv_anysource)", anysource)

    def anysource_timeout():
        # Nobody sends: the receive fails at the group's timeout, naming grex.
        g = dist.new_group(list(range(size)), timeout=datetime.timedelta(milliseconds=800))
        if rank == 0:
            w = dist.irecv(torch.empty(2), group=g, tag=9)
            t0 = time.monotonic()
            try:
                w.wait()
            except RuntimeError as e:
                assert "grex" in str(e) and "no rank sent" in str(e), str(e)
                assert time.monotonic() - t0 < 20, "took too long"
            else:
                raise AssertionError("recv without src returned with nothing sent")
        dist.barrier()
    check("recv without src times out naming grex", anysource_timeout)

    def straggler_named():
        # Issue 30: the last rank sleeps past a 1.5 s group's timeout before
        # its all_reduce; the others' Work fails naming it as alive and not in
        # the collective (its status thread answers through torch's store).
        g = dist.new_group(list(range(size)), timeout=datetime.timedelta(milliseconds=1500))
        t = torch.ones(4)
        dist.all_reduce(t, group=g)
        late = size - 1
        if rank == late:
            time.sleep(4.0)
            try:  # the others gave up: this call ends one way or the other
                dist.all_reduce(t, group=g)
            except RuntimeError:
                pass
        else:
            # torch's dump-on-timeout, which grex honours with its own ring.
            import json
            import os
            import tempfile
            prefix = os.path.join(tempfile.gettempdir(), f"grex_fr_{os.getpid()}_rank_")
            os.environ["TORCH_FR_DUMP_ON_TIMEOUT"] = "1"
            os.environ["TORCH_FR_DUMP_TEMP_FILE"] = prefix
            timed_out = False
            try:
                dist.all_reduce(t, group=g)
            except RuntimeError as e:
                msg = str(e)
                assert "grex" in msg and f"rank {late}" in msg, msg
                if "timed out" in msg:
                    timed_out = True
                    assert f"rank {late} is alive, not in the collective" in msg, msg
            else:
                raise AssertionError("all_reduce returned while a rank slept past the timeout")
            finally:
                del os.environ["TORCH_FR_DUMP_ON_TIMEOUT"], os.environ["TORCH_FR_DUMP_TEMP_FILE"]
            path = prefix + str(rank)
            if timed_out:
                assert os.path.exists(path), f"no dump at {path}"
                with open(path) as f:
                    ring = json.load(f)
                os.unlink(path)
                last = ring["entries"][-1]
                assert last["op"] == "allreduce" and last["state"] == "failed", last
        dist.barrier()
    check("a timeout names the rank behind", straggler_named)


def async_ops(rank, size, gloo):
    def futures():
        ts = [torch.full((5000,), float(k + rank)) for k in range(6)]
        seen = []
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        chained = [w.get_future().then(lambda f, k=k: seen.append(k) or f.value()[0] * 2)
                   for k, w in enumerate(works)]
        for w in reversed(works):
            assert w.wait(timeout=datetime.timedelta(seconds=30))
        for k, (t, w, c) in enumerate(zip(ts, works, chained)):
            want = size * k + size * (size - 1) / 2
            assert w.is_completed() and w.is_success(), f"work {k} not successful"
            assert t[0].item() == want, f"async all_reduce {k}: {t[0].item()} != {want}"
            assert c.wait()[0].item() == 2 * want, f"callback {k} value"
        assert sorted(seen) == list(range(6)), f"callbacks ran for {seen}"
    check("async futures and callbacks", futures)

    def ddp_hooks():
        # DDP's comm hooks chain on Work.get_future(): 3 steps with the default
        # hook and with bf16_compress_hook, on grex and on gloo, end in the same weights.
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel as DDP

        def train(group, hook):
            torch.manual_seed(0)
            model = DDP(torch.nn.Linear(16, 4), process_group=group)
            if hook is not None:
                model.register_comm_hook(group, hook)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            g = torch.Generator().manual_seed(rank)
            for _ in range(3):
                opt.zero_grad()
                model(torch.rand(8, 16, generator=g)).square().sum().backward()
                opt.step()
            return [p.detach().clone() for p in model.parameters()]

        # bf16: grex sums in f32 and rounds once, gloo rounds after every add,
        # so the weights agree to bf16's precision (2^-8), not f32's.
        for name, hook, rtol in (("allreduce", None, 1e-5),
                                 ("bf16_compress_hook", default_hooks.bf16_compress_hook, 2e-2)):
            for a, b in zip(train(dist.group.WORLD, hook), train(gloo, hook)):
                assert torch.allclose(a, b, rtol=rtol, atol=rtol), \
                    f"DDP with {name}: weights {a.flatten()[:4].tolist()} on grex, {b.flatten()[:4].tolist()} on gloo"
    check("DDP comm hooks (default, bf16_compress_hook)", ddp_hooks)

    def ddp_deadline():
        # grex_torch.hooks.deadline_hook: the last rank sleeps 1.5 s in its
        # second step; the others go on after the 200 ms deadline each step,
        # without it, and every rank still takes the same steps.
        from torch.nn.parallel import DistributedDataParallel as DDP
        import grex_torch.hooks
        torch.manual_seed(0)
        model = DDP(torch.nn.Linear(16, 4))
        hook = grex_torch.hooks.deadline_hook(200)
        model.register_comm_hook(None, hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(rank)
        late, took = size - 1, []
        for step in range(4):
            opt.zero_grad()
            loss = model(torch.rand(8, 16, generator=g)).square().sum()
            if rank == late and step == 1:
                time.sleep(1.5)
            t0 = time.monotonic()
            loss.backward()
            opt.step()
            took.append(time.monotonic() - t0)
        w = torch.cat([p.detach().flatten() for p in model.parameters()])
        ws = [torch.empty_like(w) for _ in range(size)]
        dist.all_gather(ws, w, group=gloo)
        assert all(torch.equal(ws[0], x) for x in ws), "the ranks' weights differ"
        counts = torch.tensor(hook.contributors, dtype=torch.int64)
        every = [torch.empty_like(counts) for _ in range(size)]
        dist.all_gather(every, counts, group=gloo)
        assert all(torch.equal(every[0], c) for c in every), f"contributor counts differ: {every}"
        assert len(hook.contributors) == 4 and hook.contributors[0] == size and hook.contributors[1] == size - 1, \
            hook.contributors
        if rank != late:
            assert max(took) < 1.0, f"a step waited for the straggler: {took}"
    check("DDP deadline hook leaves a straggler out", ddp_deadline)

    def barrier():
        dist.barrier()
        w = dist.barrier(async_op=True)
        w.wait()
    check("barrier", barrier)


def group_ops(rank, size, gloo):
    def subgroups():
        evens, odds = list(range(0, size, 2)), list(range(1, size, 2))
        g_even = dist.new_group(evens, timeout=datetime.timedelta(seconds=30))
        g_odd = dist.new_group(odds)
        mine = g_even if rank in evens else g_odd
        members = evens if rank in evens else odds
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=mine)
        assert t.item() == sum(members), f"subgroup all_reduce {t.item()} != {sum(members)}"
        y = torch.empty(1)
        if len(members) > 1:  # p2p inside the subgroup, by global rank
            me = members.index(rank)
            peer = members[(me + 1) % len(members)]
            src = members[(me - 1) % len(members)]
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.tensor([float(rank)]), peer, mine),
                                           dist.P2POp(dist.irecv, y, src, mine)])
            for q in reqs:
                q.wait()
            assert y.item() == src, f"subgroup recv {y.item()} != {src}"
    check("new_group subgroups", subgroups)

    def device_map():
        g = dist.new_group(backend="cpu:grex,cuda:gloo")
        assert g._get_backend(torch.device("cpu")).name() == "grex"
        t = torch.ones(3)
        dist.all_reduce(t, group=g)
        assert t[0].item() == size
    check("device map cpu:grex,cuda:gloo", device_map)

    def split():
        if not hasattr(dist, "split_group"):
            return f"skip: torch {torch.__version__} has no split_group"
        import inspect
        if "isinstance(parent_backend, ProcessGroupNCCL)" in inspect.getsource(dist.split_group):
            return f"skip: torch {torch.__version__}'s split_group splits NCCL groups only"
        # torch splits only groups bound to a device (init_process_group's
        # device_id, an accelerator); grex serves "cuda" too, so bind that.
        # (barrier() would then place its tensor on that device: unbind after.)
        dist.group.WORLD.bound_device_id = torch.device("cuda", 0)
        halves = [list(range(size // 2)), list(range(size // 2, size))]
        try:
            g = dist.split_group(split_ranks=halves)
        finally:
            dist.group.WORLD.bound_device_id = None
        members = halves[0] if rank in halves[0] else halves[1]
        t = torch.tensor([1.0])
        dist.all_reduce(t, group=g)
        assert t.item() == len(members), f"split_group all_reduce {t.item()}"
    check("split_group", split)

    def cuda():
        # tests/gpu/torch_cuda_check.py checks every CUDA op; here that the
        # dispatch takes CUDA tensors for a collective and for gather.
        if not torch.cuda.is_available():
            return "skip: no CUDA device"
        t = torch.ones(2, device="cuda")
        dist.all_reduce(t)
        assert t.cpu().tolist() == [float(size)] * 2, t
        out = [torch.empty_like(t) for _ in range(size)] if rank == 0 else None
        dist.gather(t, out, dst=0)
        if rank == 0:
            assert all(o.cpu().tolist() == [float(size)] * 2 for o in out), out
    check("CUDA tensors: all_reduce and gather", cuda)

    def errors():
        for what, fn in (("BAND", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BAND)),
                         ("int16", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16))),
                         ("bad splits", lambda: dist.all_to_all_single(
                             torch.empty(size + 1), torch.ones(size + 1), [1] * size, [1] * size))):
            try:
                fn()
            except (RuntimeError, ValueError) as e:
                assert "grex" in str(e), f"{what} raised without naming grex: {e}"
                continue
            raise AssertionError(f"{what} did not raise")
    check("unsupported requests raise naming grex", errors)
