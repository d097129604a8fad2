#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's first command: installs what is missing (Debian packages, and
# torch 2 into .venv), builds grex and trains a PyTorch model on 4 ranks over
# grex (DDP, examples/torch/ddp.py), printing each step's loss, step time and
# communication time.
#   demo.sh [RANKS] [-- ddp.py args]      e.g. demo.sh 4 -- --steps 50 --hook bf16
#   demo.sh --cpp [RANKS] [-- train args] the C++ demo (examples/train) instead
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cpp=0
[[ "${1:-}" == "--cpp" ]] && { cpp=1; shift; }
ranks=${1:-4}
shift || true
[[ "${1:-}" == "--" ]] && shift
bash "$root/tests/scripts/install-deps.sh"
# The environment with torch 2 that the PyTorch backend builds against (.venv).
GREX_TORCH_PYTHON=$(bash "$root/tests/scripts/venv.sh")
export GREX_TORCH_PYTHON
dir=$(bash "$root/tests/scripts/build.sh")
# Make `import grex_torch` (and `import grex`) work in that environment: a .pth
# file puts the build's python/ (grex, which finds this build's libgrex, and
# the extension) and the source's (grex_torch) on its path. Directories from
# .pth files come after every site directory, so a `pip install .` there still wins.
if [[ -n $(ls "$dir"/python/_grex_torch*.so 2>/dev/null) ]]; then
  py=$GREX_TORCH_PYTHON
  site=$("$py" -c 'import site; print(site.getsitepackages()[0])')
  mkdir -p "$site"
  printf '%s\n%s\n' "$dir/python" "$root/python" > "$site/grex_torch_build.pth"
  "$py" -c 'import grex_torch, grex' && echo "demo: grex_torch importable by $py (torch.distributed backend \"grex\")" >&2
fi
if ((cpp == 0)) && [[ -n $(ls "$dir"/python/_grex_torch*.so 2>/dev/null) ]]; then
  # One thread per rank for torch's kernels: the ranks share this machine's cores.
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  exec "$dir/apps/grex-run/grex-run" -n "$ranks" -- "$GREX_TORCH_PYTHON" "$root/examples/torch/ddp.py" "$@"
fi
((cpp == 1)) || echo "demo: grex_torch was not built (no torch 2 in $GREX_TORCH_PYTHON): the C++ demo instead" >&2
exec "$dir/apps/grex-run/grex-run" -n "$ranks" --backend shm -- "$dir/examples/train/train" "$@"
