# SPDX-License-Identifier: Apache-2.0
"""One rank of the grex torch 2 backend tests (test_torch2.py starts them).

    torch2_worker.py ops OUT_DIR      every operation vs gloo on the same tensors
    torch2_worker.py stall OUT_DIR    rank 1 never joins: rank 0's errors, within the timeout
    torch2_worker.py abort OUT_DIR    abort with an operation in flight; nothing hangs

RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the environment. Each
rank writes OUT_DIR/rank<R>.json: {check name: "ok", "skip: <reason>" or the failure}.
"""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import grex_torch  # noqa: F401  (registers "grex")
from torch2_checks import (allreduce_ops, alltoall_ops, async_ops, check, coalesced_ops, gather_scatter_ops,
                           group_ops, p2p_ops, results, rooted_ops)


def ops_mode(rank, size):
    gloo = dist.new_group(backend="gloo")
    for part in (allreduce_ops, rooted_ops, gather_scatter_ops, alltoall_ops, coalesced_ops, p2p_ops, async_ops,
                 group_ops):
        part(rank, size, gloo)
        dist.barrier(group=gloo)  # a failed check on one rank must not shift the next part's pairing
    dist.barrier()
    t0 = time.monotonic()
    dist.destroy_process_group()
    results["destroy_process_group"] = "ok" if time.monotonic() - t0 < 10 else "took over 10 s"


def stall_mode(rank, size):
    # The group timeout is 3 s, a subgroup's 1.5 s; rank 1 never joins.
    fast = dist.new_group(list(range(size)), timeout=datetime.timedelta(seconds=1.5))
    if rank == 1:
        time.sleep(12)
        return
    t = torch.ones(1000)

    def group_timeout():
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(10), group=fast)
        except RuntimeError as e:
            took = time.monotonic() - t0
            assert "timed out after 1500 ms" in str(e), str(e)
            # After a timeout grex asks the store, up to 2 s per absent peer, whether
            # the peers called a different collective (Communicator::Impl::diagnose):
            # 1.5 + 2 s here, where the group's 3 s timeout would give 5 s.
            assert took < 4.3, f"the subgroup's 1.5 s timeout fired after {took:.1f} s"
            return
        raise AssertionError("all_reduce on the subgroup returned with rank 1 absent")
    check("per-group timeout (new_group timeout=1.5 s)", group_timeout)

    def wait_timeout():
        w = dist.all_reduce(t, async_op=True)
        t0 = time.monotonic()
        try:
            w.wait(timeout=datetime.timedelta(milliseconds=500))
        except RuntimeError as e:
            took = time.monotonic() - t0
            assert took < 2.5, f"Work.wait(500 ms) raised after {took:.1f} s"
            assert "grex" in str(e) and "within 500 ms" in str(e), str(e)
        else:
            raise AssertionError("Work.wait(timeout) returned with rank 1 absent")
        t1 = time.monotonic()
        try:
            w.wait()
        except RuntimeError as e:
            took = time.monotonic() - t1
            assert took < 7, f"the group timeout (3 s) fired after {took:.1f} s more"
            msg = str(e)
            assert "grex: rank 0" in msg and "rank 1" in msg and "timed out" in msg, msg
            results["stall message"] = msg.splitlines()[0][:300]
            return
        raise AssertionError("all_reduce with a stalled rank returned normally")
    check("stalled rank: Work.wait(timeout) then the group timeout", wait_timeout)


def abort_mode(rank, size):
    if rank == 1:
        time.sleep(4)
        return
    w = dist.all_reduce(torch.ones(100), async_op=True)  # rank 1 never joins
    r = dist.irecv(torch.empty(4), src=1)  # nor sends
    time.sleep(0.2)  # both are in flight by now, not only queued

    def abort():
        t0 = time.monotonic()
        if hasattr(dist.distributed_c10d, "_abort_process_group"):
            dist.distributed_c10d._abort_process_group()
        else:
            dist.group.WORLD._get_backend(torch.device("cpu")).abort()
            dist.destroy_process_group()
        took = time.monotonic() - t0
        assert took < 2, f"abort took {took:.1f} s"
        for what, work in (("all_reduce", w), ("irecv", r)):
            t1 = time.monotonic()
            try:
                work.wait()
            except RuntimeError as e:
                assert "grex" in str(e) and "abort" in str(e), f"{what}: {e}"
                assert time.monotonic() - t1 < 1, f"{what} failed only after {time.monotonic() - t1:.1f} s"
                continue
            raise AssertionError(f"the in-flight {what} succeeded after abort")
    check("abort with an operation in flight", abort)


def main():
    mode, out_dir = sys.argv[1], sys.argv[2]
    timeout = datetime.timedelta(seconds=3 if mode == "stall" else 60)
    dist.init_process_group("grex", timeout=timeout)
    rank, size = dist.get_rank(), dist.get_world_size()
    dist.barrier()  # every rank is set up (rank 0's store serves the others' setup until then)
    {"ops": ops_mode, "stall": stall_mode, "abort": abort_mode}[mode](rank, size)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f, indent=1)
    sys.stdout.flush()
    os._exit(0)  # a stalled or aborted group cannot shut down in order


if __name__ == "__main__":
    main()
