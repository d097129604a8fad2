#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The grex torch.distributed backend under each launcher:
#   torch_test.sh CASE PYTHON GREX_RUN     (PYTHONPATH must reach grex_torch)
#   pytest         test_torch2.py: every operation vs gloo at 2 and 4 ranks, stall, abort
#   workloads      test_workloads.py: examples/torch (DDP and its hooks, FSDP2, DTensor TP) vs gloo
#   import         python3 -c "import grex_torch" registers the backend
#   grex_run_2/4   backend_check.py collectives under grex-run
#   ddp            20 DDP steps on grex equal 20 on gloo (4 ranks)
#   torchrun       torchrun --standalone --nproc_per_node 2 (with PEERS-NOTES' --redirects 1 --tee 1)
#   mpirun         2 ranks under Open MPI (skips without mpirun)
#   slurm          2 ranks with Slurm's variables only (SLURM_PROCID, SLURM_NTASKS)
#   installed      `meson install` into a scratch root: the package imports from there alone
set -u
CASE=$1 PY=$2 GREX_RUN=$3 BUILD=${4:-}
HERE=$(cd "$(dirname "$0")" && pwd)
CHECK=$HERE/backend_check.py
TMP=$(mktemp -d "${TMPDIR:-/tmp}/grex-torch-test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
# What torch leaves in the temporary directory (torchrun's torchelastic_*,
# the inductor's cache) goes with $TMP.
mkdir "$TMP/tmp" && export TMPDIR=$TMP/tmp
fail() { echo "FAIL [$CASE]: $*" >&2; cat "$TMP"/* >&2 2>/dev/null; exit 1; }
port() { echo $((30000 + RANDOM % 20000)); }
expect() { grep -q -- "$1" "$TMP/out" || fail "no '$1' in the output"; }

case $CASE in
  pytest)
    "$PY" -c 'import pytest' 2>/dev/null || { echo "SKIP: no pytest in $PY (tests/scripts/venv.sh installs it)"; exit 77; }
    "$PY" -m pytest -q -rs -p no:cacheprovider "$HERE/test_torch2.py" >"$TMP/out" 2>&1 || fail "pytest failed"
    cat "$TMP/out"
    grep -q " passed" "$TMP/out" || fail "no test passed" ;;
  workloads)
    "$PY" -c 'import pytest' 2>/dev/null || { echo "SKIP: no pytest in $PY (tests/scripts/venv.sh installs it)"; exit 77; }
    GREX_RUN=$GREX_RUN "$PY" -m pytest -q -rs -p no:cacheprovider "$HERE/test_workloads.py" >"$TMP/out" 2>&1 ||
      fail "pytest failed"
    cat "$TMP/out"
    grep -q " passed" "$TMP/out" || fail "no test passed" ;;
  import)
    "$PY" -c 'import grex_torch, torch.distributed as d; assert d.Backend.GREX == "grex"; print("grex_torch", d.Backend.GREX, d.Backend.backend_capability["grex"])' \
      >"$TMP/out" 2>&1 || fail "import failed"
    expect "grex_torch grex \['cpu', 'cuda'\]" ;;
  grex_run_2 | grex_run_4)
    n=${CASE##*_}
    "$GREX_RUN" -n "$n" --no-tag-output -- "$PY" "$CHECK" collectives >"$TMP/out" 2>&1 || fail "exit $?"
    expect "PASS collectives on $n ranks" ;;
  ddp)
    "$GREX_RUN" -n 4 --no-tag-output -- "$PY" "$CHECK" ddp 20 >"$TMP/out" 2>&1 || fail "exit $?"
    expect "PASS ddp on 4 ranks" ;;
  torchrun)
    (cd "$TMP" && timeout 300 "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 --redirects 1 --tee 1 \
      "$CHECK" collectives) >"$TMP/out" 2>&1 || fail "exit $?"
    expect "PASS collectives on 2 ranks" ;;
  mpirun)
    command -v mpirun >/dev/null || { echo "SKIP: mpirun (Open MPI) is not installed"; exit 77; }
    timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader -x PYTHONPATH \
      -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$(port)" "$PY" "$CHECK" collectives >"$TMP/out" 2>&1 || fail "exit $?"
    expect "PASS collectives on 2 ranks" ;;
  slurm)
    p=$(port)
    for r in 1 0; do
      env -u RANK -u WORLD_SIZE SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
        timeout 300 "$PY" "$CHECK" collectives >"$TMP/r$r" 2>&1 &
      eval "pid$r=$!"
    done
    wait "$pid0" || fail "rank 0 exited $?"
    wait "$pid1" || fail "rank 1 exited $?"
    cp "$TMP/r0" "$TMP/out"
    expect "PASS collectives on 2 ranks" ;;
  installed)
    meson install -C "$BUILD" --destdir "$TMP/root" --quiet >"$TMP/install.log" 2>&1 || fail "meson install failed"
    pkg=$(find "$TMP/root" -type d -name grex_torch | head -n 1)
    lib=$(dirname "$(find "$TMP/root" -name 'libgrex.so.0' | head -n 1)")
    [[ -n $pkg && -f $pkg/__init__.py && -n $(ls "$pkg"/_grex_torch*.so) ]] || fail "no installed grex_torch package"
    PYTHONPATH=$(dirname "$pkg") LD_LIBRARY_PATH=$lib "$PY" -c \
      'import grex_torch, sys; assert grex_torch.__file__.startswith(sys.argv[1]), grex_torch.__file__; print("installed", grex_torch.__file__)' \
      "$TMP/root" >"$TMP/out" 2>&1 || fail "the installed package does not import"
    expect "installed $TMP/root"
    # Where this interpreter looks, when installed for real: pythonX.Y/dist-packages
    # for Debian's, pythonX.Y/site-packages for a virtual environment's.
    case $pkg in *"/python3."*"/"[ds]"ite-packages/grex_torch" | *"/python3."*"/dist-packages/grex_torch") ;;
      *) fail "installed outside pythonX.Y/{dist,site}-packages: $pkg" ;; esac ;;
  *) fail "unknown case" ;;
esac
echo "PASS [$CASE]"
