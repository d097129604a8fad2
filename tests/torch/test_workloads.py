# SPDX-License-Identifier: Apache-2.0
"""pytest: the trainers people run, on grex against gloo. Each case launches
one of examples/torch/*.py twice, once per backend, with torchrun (grex-run
for one case), and compares rank 0's 20 losses: bitwise at 2 ranks (a sum of
two is the same in any order), within 1e-4 relative at 4 ranks, where the
two libraries add in different orders.

The last case trains with grex's compressed DDP hook (grex_torch/hooks.py) against
uncompressed gloo, within 2 %.

Run through meson (suite torch), which sets PYTHONPATH to this build's grex
and grex_torch and GREX_RUN to its grex-run.
"""
import json
import os
import subprocess
import sys
import tempfile

import pytest

torch = pytest.importorskip("torch", reason="no torch in this interpreter (bash tests/scripts/venv.sh makes one)")
if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 4):
    pytest.skip(f"torch {torch.__version__} is older than 2.4", allow_module_level=True)
try:
    import grex_torch  # noqa: F401
except ImportError as e:
    pytest.skip(f"grex_torch is not importable ({e})", allow_module_level=True)

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "torch")
STEPS = 20
# (example, its options, rank counts): small models, so 2 cores run each launch in seconds.
CASES = [
    ("ddp", ["--hook", "none"], (2, 4)),
    ("ddp", ["--hook", "bf16"], (2,)),
    ("ddp", ["--hook", "powersgd"], (2,)),
    ("fsdp2", [], (2, 4)),
    ("tensor_parallel", [], (2, 4)),
]
PARAMS = [pytest.param(ex, opts, n, id=f"{ex}{''.join(opts).replace('--hook', '-')}-{n}ranks")
          for ex, opts, counts in CASES for n in counts]


def run(example, opts, ranks, backend, launcher="torchrun"):
    """Rank 0's losses for one launch; fails with the ranks' output otherwise.
    The gloo reference gets up to three launches: torch 2.11's gloo rarely
    aborts a rank at exit, after the last step ("terminate called without an
    active exception", seen once in about 30 launches, and twice in a row once
    in session 6's last full run), which says nothing of grex."""
    for attempt in range(3 if backend == "gloo" else 1):
        try:
            return launch(example, opts, ranks, backend, launcher)
        except AssertionError:
            if backend != "gloo" or attempt == 2:
                raise


def launch(example, opts, ranks, backend, launcher, steps=STEPS, want="losses"):
    script = os.path.join(EXAMPLES, example + ".py")
    args = [script, "--backend", backend, "--steps", str(steps), "--hidden", "512", "--json"] + opts
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"] + args
    else:
        cmd = [os.environ["GREX_RUN"], "-n", str(ranks), "--", sys.executable] + args
    p = run_in_tmpdir(cmd, 240)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}:\n{out[-4000:]}"
    lines = [line for line in p.stdout.splitlines() if line.lstrip("[0] ").startswith('{"losses"')]
    assert lines, f"no JSON line from rank 0:\n{out[-4000:]}"
    report = json.loads(lines[-1][lines[-1].index("{"):])
    assert len(report["losses"]) == steps
    return report[want]


def run_in_tmpdir(cmd, timeout):
    """Runs cmd with OMP_NUM_THREADS=1 and a TMPDIR of its own, removed after:
    torchrun's agent leaves a torchelastic_* directory in the temporary
    directory at every launch."""
    with tempfile.TemporaryDirectory(prefix="grex-torch-") as tmp:
        env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=tmp)
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def compare(got, ref, ranks, what):
    if ranks == 2:
        assert got == ref, f"{what}: grex's losses differ from gloo's at 2 ranks:\n{got}\n{ref}"
    else:
        assert got == pytest.approx(ref, rel=1e-4), f"{what}: grex's losses differ from gloo's:\n{got}\n{ref}"
    assert min(got[-5:]) < got[0], f"{what}: the loss did not go down: {got}"


_gloo_avg = []


def gloo_averages():
    """Whether this torch's gloo averages in reduce_scatter_tensor(op=AVG);
    torch 2.7.1's sums (measured), so FSDP2, which averages fp32 gradients
    that way, has no gloo reference there."""
    if not _gloo_avg:
        probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gloo_avg_probe.py")
        p = run_in_tmpdir([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", probe],
                          120)
        got = [line.split()[-1] for line in p.stdout.splitlines() if "gloo-avg" in line]
        assert got, f"the gloo AVG probe printed nothing:\n{(p.stdout + p.stderr)[-2000:]}"
        _gloo_avg.append(float(got[0]) == 1.5)
    return _gloo_avg[0]


@pytest.mark.parametrize("example,opts,ranks", PARAMS)
def test_trains_as_on_gloo(example, opts, ranks):
    if example == "fsdp2" and not gloo_averages():
        pytest.skip(f"torch {torch.__version__}'s gloo sums where reduce_scatter_tensor asks ReduceOp.AVG "
                    "(FSDP2's fp32 gradients): no gloo reference")
    ref = run(example, opts, ranks, "gloo")
    got = run(example, opts, ranks, "grex")
    compare(got, ref, ranks, f"{example} {' '.join(opts)} at {ranks} ranks")


@pytest.mark.skipif("GREX_RUN" not in os.environ, reason="GREX_RUN (this build's grex-run) is not set")
def test_ddp_under_grex_run():
    ref = run("ddp", [], 2, "gloo")
    got = run("ddp", [], 2, "grex", launcher="grex-run")
    compare(got, ref, 2, "DDP under grex-run")


def test_seed_reaches_the_weights_and_the_batches():
    """--seed S starts another run (the model's initial weights and every
    rank's batches): its losses differ from seed 0's from the first step, and
    gloo under the same seed gives grex's losses exactly (2 ranks)."""
    ref = run("ddp", ["--seed", "3"], 2, "gloo")
    got = run("ddp", ["--seed", "3"], 2, "grex")
    compare(got, ref, 2, "DDP at --seed 3")
    first = run("ddp", [], 2, "grex")
    assert got[0] != first[0], f"--seed 3 began where seed 0 did: {got[0]}"


def test_ddp_with_grex_compression_trains_as_uncompressed_gloo():
    """Issue 29: DDP with grex's in-ring bf16 hook (error feedback on) reaches
    gloo's uncompressed losses within 2 % at every step, and does differ
    (the hook is in use: bf16 rounds)."""
    ref = run("ddp", ["--hook", "none"], 2, "gloo")
    got = run("ddp", ["--hook", "grex-bf16"], 2, "grex")
    assert got == pytest.approx(ref, rel=0.02), f"grex-bf16 losses stray from gloo's:\n{got}\n{ref}"
    assert got != ref, "the compressed hook gave gloo's exact losses: was it used?"
    assert min(got[-5:]) < got[0], f"the loss did not go down: {got}"


def test_ddp_topk_fraction_reaches_the_hook():
    """Issue 29: the top-k hook's fraction reaches grex. At 2 ranks, fraction 1
    sends every value and sums exactly: gloo's losses bit for bit. Fraction
    0.01 sends 1 % of each bucket: the losses differ, and still go down."""
    ref = run("ddp", ["--hook", "none"], 2, "gloo")
    exact = run("ddp", ["--hook", "grex-topk", "--topk-fraction", "1", "--momentum-correction", "0"], 2, "grex")
    assert exact == ref, f"top-k of every value strays from gloo's exact losses:\n{exact}\n{ref}"
    # With the momentum correction the optimizer's buffer is rebuilt from the
    # averaged velocity: the same steps up to float32 rounding.
    every = run("ddp", ["--hook", "grex-topk", "--topk-fraction", "1"], 2, "grex")
    assert every == pytest.approx(ref, rel=1e-5), f"top-k of every value, corrected, strays:\n{every}\n{ref}"
    sparse = run("ddp", ["--hook", "grex-topk", "--topk-fraction", "0.01"], 2, "grex")
    assert sparse != ref, "top-k 1 % gave gloo's exact losses: was the fraction used?"
    assert min(sparse[-5:]) < sparse[0], f"the loss did not go down with top-k 1 %: {sparse}"


def test_ddp_topk_momentum_correction():
    """Issue 29: under momentum SGD, top-k 1 % with error feedback reaches a
    held-out loss near the uncompressed one only when the hook compresses the
    velocity (momentum correction), and within 5 % after a warm-up that starts
    denser. 300 steps at 2 ranks, lr 0.02, hidden 512; the runs are
    deterministic (session 15: 0.668 uncompressed, 0.735 corrected, 0.834 not)."""
    opts = ["--lr", "0.02"]
    ref = launch("ddp", opts + ["--hook", "none"], 2, "grex", "torchrun", steps=300, want="eval_loss")
    fixed = launch("ddp", opts + ["--hook", "grex-topk"], 2, "grex", "torchrun", steps=300, want="eval_loss")
    plain = launch("ddp", opts + ["--hook", "grex-topk", "--momentum-correction", "0"], 2, "grex", "torchrun",
                   steps=300, want="eval_loss")
    assert fixed <= 1.15 * ref, f"top-k 1 %, corrected: eval loss {fixed} against {ref} uncompressed"
    assert fixed < plain - 0.05, f"the correction did not help: {fixed} corrected, {plain} not"
    # Deep gradient compression's warm-up: the first 100 steps send from 25 %
    # of each bucket down to 1 % (session 16: 0.681, within 2 % of 0.668).
    warm = launch("ddp", opts + ["--hook", "grex-topk", "--topk-warmup", "100"], 2, "grex", "torchrun",
                  steps=300, want="eval_loss")
    assert warm <= 1.05 * ref, f"top-k 1 % after a warm-up: eval loss {warm} against {ref} uncompressed"
    assert warm < fixed - 0.02, f"the warm-up did not help: {warm} with it, {fixed} without"
