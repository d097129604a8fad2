#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's first command: installs what is missing, builds grex and runs the
# 4-rank data-parallel training demo over shared memory.
#   demo.sh [RANKS] [-- train args]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
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
exec "$dir/apps/grex-run/grex-run" -n "$ranks" --backend shm -- "$dir/examples/train/train" "$@"
