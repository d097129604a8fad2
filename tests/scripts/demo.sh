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
dir=$(bash "$root/tests/scripts/build.sh")
exec "$dir/apps/grex-run/grex-run" -n "$ranks" --backend shm -- "$dir/examples/train/train" "$@"
