#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU check: run from the repository root on a machine with an NVIDIA GPU
# (the device tool's image: nvcc 13, torch 2.11). It builds what it needs with
# nvcc alone (no Meson, DPDK or rdma-core needed), runs the GPU tests and
# benchmarks, and prints a report, also written to $OUT/device-check.txt when
# OUT is set. Within 8 minutes of wall time. Where no GPU is found it says so
# in one line and exits 0 at once.
#   bash tests/gpu/device-check.sh
# Today it runs (issue 26 grows it):
#   reduce_gpu_check  grex's reduction kernels (lib/gpu/reduce_kernels.cuh) vs the
#                     element arithmetic the CPU kernels are held to, bit for bit,
#                     every kind and op, odd sizes and unaligned starts; then the
#                     f32 sum's throughput against a device-to-device copy
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
start=$(date +%s)
if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L > /dev/null 2>&1; then
  echo "device-check: no GPU here (nvidia-smi finds none): nothing to run"
  exit 0
fi
report=$(mktemp)
trap 'rm -f "$report"; [[ -n ${tmp:-} ]] && rm -rf "$tmp"' EXIT
say() { echo "$*" | tee -a "$report"; }
finish() {
  say "device-check: $1 in $(($(date +%s) - start)) s"
  if [[ -n ${OUT:-} ]]; then mkdir -p "$OUT" && cp "$report" "$OUT/device-check.txt"; fi
  exit "$2"
}
cuda_home=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
nvcc=$(command -v nvcc || echo "$cuda_home/bin/nvcc")
[[ -x $nvcc ]] || { say "device-check: no nvcc (PATH, CUDA_HOME, $cuda_home/bin)"; finish "FAILED" 1; }
say "device-check: $(date -u +%Y-%m-%dT%H:%M:%SZ), grex $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu: /')"
say "nvcc: $("$nvcc" --version | tail -1)"
py=$(command -v python3 || true)
[[ -n $py ]] && say "torch: $("$py" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>/dev/null || echo none)"
tmp=$(mktemp -d)
status=0
# sm_90 (H100, H200) and sm_80 (A100); never --use_fast_math (see reduce_elem.h).
if ! "$nvcc" -std=c++20 -O2 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
     -I "$root/lib" "$root/tests/gpu/reduce_gpu_check.cu" -o "$tmp/reduce_gpu_check" > "$tmp/build.log" 2>&1; then
  cat "$tmp/build.log" | tee -a "$report"
  finish "FAILED (reduce_gpu_check did not build)" 1
fi
say "--- reduce_gpu_check"
timeout 300 "$tmp/reduce_gpu_check" 2>&1 | tee -a "$report"
rc=${PIPESTATUS[0]}
((rc == 0)) || status=1
((status == 0)) && finish "PASS" 0
finish "FAILED" 1
