#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU check: run from the repository root on a machine with an NVIDIA GPU
# (the device tool's image: nvcc 13, torch 2.11). It builds what it needs with
# nvcc alone (no Meson, DPDK or rdma-core needed), runs the GPU tests and
# benchmarks, and prints a report, also written to $OUT/device-check.txt when
# OUT is set. Within 8 minutes of wall time. Where no GPU is found it says so
# in one line and exits 0 at once.
#   bash tests/gpu/device-check.sh
# GREX_DEVICE_CHECK_QUICK=1 runs the checks without the benchmarks and
# grex-perf (a rerun after a fix, in about a minute).
# It runs (issue 26 grows it):
#   reduce_gpu_check      grex's reduction kernels (lib/gpu/reduce_kernels.cuh) vs the
#                         element arithmetic the CPU kernels are held to, bit for bit,
#                         every kind and op, odd sizes and unaligned starts; then the
#                         f32 sum's throughput against a device-to-device copy
#   collectives_gpu_check GPU buffers in every collective (stream-ordered calls, 2 and 4
#                         ranks): over shm in six modes (GPU to GPU, staged, caller
#                         waits, ...), then over dpdk memif (staged); each followed by
#                         GPU against host buffers at 4, 64 and 256 MiB; a rank that
#                         exits or stops calling mid-job is named in time
#   grex-perf --use_cuda  allreduce, reduce_scatter, allgather, alltoall, broadcast, sendrecv on GPU
#                         buffers, checked, 64 KiB to 64 MiB (2 and 4 ranks), allreduce to
#                         1 GiB; then barriers on the host and staging, side by side
#   torch_cuda_check.py   grex_torch on CUDA tensors under torchrun (2 ranks): every
#                         op with a CUDA form, DDP against gloo, all_reduce timings
# The last three need libgrex, which needs Debian packages the GPU image lacks:
# tests/gpu/prepare-carry.sh builds them on the host into .gpu-carry/, which
# the device call carries (GREX_GPU_PREBUILT names another folder). The torch
# extension is compiled here, against this machine's torch.
set -uo pipefail
quick=${GREX_DEVICE_CHECK_QUICK:-0}
bench=--bench
[[ $quick == 1 ]] && bench=
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
pre=${GREX_GPU_PREBUILT:-$root/.gpu-carry}
if [[ -x $pre/collectives_gpu_check && -f $pre/libgrex.so.0 ]]; then
  say "--- prebuilt on the host from $(tr '\n' ' ' < "$pre/built-from" 2>/dev/null)"
  # The Debian libraries prepare-carry.sh brought, and DPDK's memif plugins
  # (the image has no DPDK plugin folder, so only these load).
  export LD_LIBRARY_PATH="$pre/lib:$pre${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export GREX_DPDK_ARGS="-d $pre/lib/librte_bus_vdev.so.23 -d $pre/lib/librte_mempool_ring.so.23 -d $pre/lib/librte_net_memif.so.23"
  say "--- collectives_gpu_check $bench (shm)"
  timeout 240 "$pre/collectives_gpu_check" $bench --timeout 60 2>&1 | tee -a "$report"
  rc=${PIPESTATUS[0]}
  ((rc == 0)) || { say "collectives_gpu_check: exit $rc"; status=1; }
  say "--- collectives_gpu_check --backend dpdk $bench (memif between the ranks, staged)"
  timeout 150 "$pre/collectives_gpu_check" --backend dpdk --mode stream $bench --timeout 60 2>&1 | tee -a "$report"
  rc=${PIPESTATUS[0]}
  ((rc == 0)) || { say "collectives_gpu_check --backend dpdk: exit $rc"; status=1; }
  if [[ $quick != 1 && -x $pre/grex-perf && -x $pre/grex-run ]]; then
    # perf RANKS MODE MIN MAX [VAR=VALUE...]: one checked grex-perf run, rows only.
    perf() {
      local n=$1 mode=$2 lo=$3 hi=$4
      shift 4
      say "grex-perf $mode --use_cuda, $n ranks${*:+, $*}"
      env "$@" timeout 120 "$pre/grex-run" -n "$n" "$pre/grex-perf" "$mode" --use_cuda -b "$lo" -e "$hi" -f 4 \
        -n 10 -w 2 -c 1 2>&1 | grep -E '^\[0\] +[0-9]|wrong|Out of|rror' | tee -a "$report"
      rc=${PIPESTATUS[0]}
      ((rc == 0)) || { say "grex-perf $mode --use_cuda $*: exit $rc"; status=1; }
    }
    say "--- grex-perf --use_cuda (ranks on GPU 0, shm, checked): defaults, then the other paths"
    for mode in allreduce reduce_scatter allgather alltoall broadcast; do perf 2 "$mode" 64K 64M; done
    perf 2 allreduce 64M 1G
    perf 4 allreduce 64K 64M
    perf 4 alltoall 64K 64M
    perf 2 sendrecv 64K 64M
    for mode in allreduce reduce_scatter; do
      perf 2 "$mode" 64K 16M GREX_GPU_IPC_SYNC=host
      perf 2 "$mode" 64K 16M GREX_GPU_STAGING=1
    done
  fi
  if [[ -n $py ]] && "$py" -c 'import torch, torch.distributed' > /dev/null 2>&1; then
    say "--- grex_torch: building the extension against this torch"
    ext=$tmp/torch && mkdir -p "$ext"
    mapfile -t ti < <("$py" -c 'import sysconfig, torch, torch.utils.cpp_extension as e
print(e.include_paths()[0]); print(e.library_paths()[0]); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(sysconfig.get_paths()["include"]); print(sysconfig.get_config_var("EXT_SUFFIX"))
f = getattr(e, "_get_pybind11_abi_build_flags", list); print(" ".join(a.replace(chr(92), "") for a in f()))')
    cflags=(-std=c++20 -O2 -fPIC -Wno-unused-parameter -I "$root/lib/include" -isystem "${ti[0]}"
            -isystem "${ti[0]}/torch/csrc/api/include" -isystem "${ti[3]}" -D_GLIBCXX_USE_CXX11_ABI="${ti[2]}"
            -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_grex_torch ${ti[5]:-})
    pids=()
    for f in backend collectives p2p; do
      g++ "${cflags[@]}" -c "$root/python/grex_torch/$f.cc" -o "$ext/$f.o" > "$ext/$f.log" 2>&1 & pids+=($!)
    done
    built=1
    for p in "${pids[@]}"; do wait "$p" || built=0; done
    ln -sf "$pre/libgrex.so.0" "$ext/libgrex.so"
    if ((built)) && g++ -shared -o "$ext/_grex_torch${ti[4]}" "$ext"/*.o -L "$ext" -lgrex -L "${ti[1]}" \
         -Wl,-rpath,"${ti[1]}" -Wl,-rpath,"$pre" -Wl,-rpath,"$pre/lib" -Wl,-rpath-link,"$pre/lib" -ltorch_python -ltorch -ltorch_cpu -lc10 > "$ext/link.log" 2>&1; then
      say "--- torch_cuda_check.py $bench (torchrun, 2 ranks on GPU 0)"
      PYTHONPATH="$root/python:$ext" OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 \
        timeout 300 "$py" -m torch.distributed.run --standalone --nproc_per_node 2 \
        "$root/tests/gpu/torch_cuda_check.py" $bench 2>&1 | tee -a "$report"
      rc=${PIPESTATUS[0]}
      ((rc == 0)) || { say "torch_cuda_check: exit $rc"; status=1; }
    else
      cat "$ext"/*.log | tail -40 | tee -a "$report"
      say "grex_torch: the extension did not build"
      status=1
    fi
  else
    say "--- torch_cuda_check: SKIP, no torch here"
  fi
else
  say "--- collectives_gpu_check, torch_cuda_check: SKIP, nothing prebuilt in $pre (run tests/gpu/prepare-carry.sh on the host and carry .gpu-carry)"
fi
((status == 0)) && finish "PASS" 0
finish "FAILED" 1
