#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The training demo on 1 and 4 shm ranks reaches the same loss (fp tolerance),
# and the loss goes down.
set -euo pipefail
grex_run=$1
train=$2
steps=${3:-80}
out1=$("$grex_run" -n 1 --no-tag-output -- "$train" --steps "$steps" --log-every 20)
out4=$("$grex_run" -n 4 --no-tag-output -- "$train" --steps "$steps" --log-every 20)
echo "$out1"
echo "$out4"
first=$(echo "$out1" | awk '/^step    0/ {print $4}')
l1=$(echo "$out1" | awk '/^final loss/ {print $3}')
l4=$(echo "$out4" | awk '/^final loss/ {print $3}')
[[ -n "$first" && -n "$l1" && -n "$l4" ]] || { echo "FAIL: missing loss lines"; exit 1; }
python3 - "$first" "$l1" "$l4" <<'PY'
import sys
first, l1, l4 = map(float, sys.argv[1:])
rel = abs(l1 - l4) / max(abs(l1), 1e-12)
print(f"initial {first:.6f} final 1-rank {l1:.6f} 4-rank {l4:.6f} relative difference {rel:.2e}")
assert l1 < 0.8 * first, "loss did not go down"
assert rel < 1e-4, "1-rank and 4-rank losses differ beyond fp tolerance"
PY
echo "PASS"
