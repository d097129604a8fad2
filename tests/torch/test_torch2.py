# SPDX-License-Identifier: Apache-2.0
"""pytest: grex as a torch 2 backend. Each launch starts N ranks of
torch2_worker.py (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, as torchrun
sets them); every check the ranks made becomes one test here.

Run through meson (suite torch: `meson test -C build --suite torch`), which
sets PYTHONPATH to this build's grex and grex_torch.
"""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch", reason="no torch in this interpreter (bash tests/scripts/venv.sh makes one)")
if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 4):
    pytest.skip(f"torch {torch.__version__} is older than 2.4", allow_module_level=True)
try:
    import grex_torch  # noqa: F401
except ImportError as e:
    pytest.skip(f"grex_torch is not importable ({e}); build with -Dtorch_python=<venv python>",
                allow_module_level=True)

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch2_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(mode, size, tmp_path, limit_s):
    """Runs `size` ranks of the worker; returns (results per rank, seconds, outputs)."""
    port = free_port()
    procs = []
    t0 = time.monotonic()
    for r in range(size):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(size), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(size),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        log = open(tmp_path / f"rank{r}.log", "w")
        procs.append((subprocess.Popen([sys.executable, WORKER, mode, str(tmp_path)], env=env, stdout=log,
                                       stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + limit_s
    hung = []
    for r, (p, log) in enumerate(procs):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            hung.append(r)
        log.close()
    took = time.monotonic() - t0
    logs = {r: (tmp_path / f"rank{r}.log").read_text()[-3000:] for r in range(size)}
    assert not hung, f"ranks {hung} of '{mode}' still ran after {limit_s} s:\n" + "\n".join(logs.values())
    results = {}
    for r in range(size):
        path = tmp_path / f"rank{r}.json"
        assert path.exists(), f"rank {r} of '{mode}' wrote no results (exit {procs[r][0].returncode}):\n{logs[r]}"
        results[r] = json.loads(path.read_text())
    return results, took, logs


_runs = {}


def run_ops(size, tmp_path_factory):
    if size not in _runs:
        _runs[size] = launch("ops", size, tmp_path_factory.mktemp(f"ops{size}"), 240)
    return _runs[size]




@pytest.mark.parametrize("size", [2, 4])
def test_every_operation_matches_gloo(size, tmp_path_factory):
    results, took, _ = run_ops(size, tmp_path_factory)
    failures = [f"rank {r}: {name}: {what}" for r, res in results.items() for name, what in res.items()
                if what != "ok" and not what.startswith("skip:")]
    names = set(results[0])
    skipped = {name: what for name, what in results[0].items() if what.startswith("skip:")}
    print(f"{size} ranks: {len(names)} checks per rank in {took:.1f} s; skipped: {skipped or 'none'}")
    # Each family the worker covers must have run (a renamed check must not vanish silently).
    for family in ("all_reduce torch.bfloat16 PREMUL_SUM", "all_reduce torch.uint8 PRODUCT", "broadcast torch.int32 root 1",
                   "reduce torch.float16 root 0", "gather root 1", "scatter root 0", "all_gather torch.uint8",
                   "reduce_scatter torch.float64", "all_to_all_single uneven", "all_to_all uneven lists",
                   "coalesced all_reduce", "coalesced all_gather_into_tensor", "all_gather_coalesced",
                   "coalesced reduce_scatter_tensor",
                   "isend then irecv around the ring", "batch_isend_irecv", "send and recv",
                   "recv without src (recv_anysource)", "recv without src times out naming grex",
                   "async futures and callbacks",
                   "DDP comm hooks (default, bf16_compress_hook)", "barrier",
                   "new_group subgroups", "device map cpu:grex,cuda:gloo", "split_group",
                   "unsupported requests raise naming grex", "destroy_process_group"):
        assert family in names, f"check '{family}' did not run"
    assert not failures, "\n".join(failures)


def test_stalled_rank_errors_within_the_timeout(tmp_path):
    results, took, logs = launch("stall", 2, tmp_path, 30)
    res = results[0]
    assert res.get("per-group timeout (new_group timeout=1.5 s)") == "ok", res
    assert res.get("stalled rank: Work.wait(timeout) then the group timeout") == "ok", res
    print("stall:", res.get("stall message"))


def test_abort_never_hangs(tmp_path):
    results, took, logs = launch("abort", 2, tmp_path, 30)
    assert results[0].get("abort with an operation in flight") == "ok", results[0]
