#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds, on this host, what device-check.sh runs on a GPU machine that has no
# Debian packages (the device tool's image: nvcc, torch, g++, no OpenSSL
# headers, DPDK or rdma-core): libgrex, collectives_gpu_check, grex-perf and
# grex-run from a build without verbs, copied into .gpu-carry/ (git ignores it
# through .git/info/exclude), with the Debian libraries they load that such an
# image lacks (DPDK's, and the three DPDK plugins a memif port needs) in
# .gpu-carry/lib. Then, with the device tool:
#   run  command: bash tests/gpu/device-check.sh   carry: [".gpu-carry"]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${GREX_GPU_BUILD_DIR:-build-gpu}
if [[ ! -f $build/build.ninja ]]; then
  meson setup "$build" -Dverbs=disabled -Dtorch=disabled -Dbenchmarks=disabled --buildtype=release
fi
ninja -C "$build" tests/gpu/collectives_gpu_check libgrex.so.0.1.0 apps/grex-perf/grex-perf apps/grex-run/grex-run
grep -qx '/.gpu-carry/' .git/info/exclude 2>/dev/null || echo '/.gpu-carry/' >> .git/info/exclude
rm -rf .gpu-carry && mkdir .gpu-carry
cp "$build/tests/gpu/collectives_gpu_check" .gpu-carry/
cp "$build/libgrex.so.0.1.0" .gpu-carry/libgrex.so.0
cp "$build/apps/grex-perf/grex-perf" "$build/apps/grex-run/grex-run" .gpu-carry/
# The libraries they need beyond what any Linux has (libc, libstdc++, OpenSSL:
# the GPU image has those), found by ldd, recursively; and DPDK's memif plugins.
mkdir .gpu-carry/lib
pmds=$(ls -d "$(pkg-config --variable=libdir libdpdk 2>/dev/null)"/dpdk/pmds-* 2>/dev/null | head -n 1 || true)
plugins=()
if [[ -n $pmds ]]; then
  for p in librte_bus_vdev librte_mempool_ring librte_net_memif; do
    f=$(ls "$pmds"/$p.so.* 2>/dev/null | head -n 1)
    [[ -n $f ]] && plugins+=("$(readlink -f "$f")")
  done
fi
system='^(linux-vdso|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcrypto|libssl|ld-linux-x86-64)\.'
todo=(.gpu-carry/collectives_gpu_check .gpu-carry/libgrex.so.0 .gpu-carry/grex-perf "${plugins[@]}")
declare -A seen=()
while ((${#todo[@]})); do
  f=${todo[0]}
  todo=("${todo[@]:1}")
  while read -r name path; do
    [[ -z $path || $name =~ $system || -n ${seen[$name]:-} || $name == libgrex.so.0 ]] && continue
    seen[$name]=1
    cp -L "$path" ".gpu-carry/lib/$name"
    todo+=("$path")
  done < <(ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
done
for f in "${plugins[@]}"; do cp -L "$f" ".gpu-carry/lib/$(basename "${f%.*}")"; done  # as librte_x.so.23
git rev-parse --short HEAD > .gpu-carry/built-from
git diff --quiet HEAD -- lib tests/gpu python || echo "(plus uncommitted changes)" >> .gpu-carry/built-from
echo "prepare-carry: .gpu-carry holds $(ls .gpu-carry | tr '\n' ' ')($(du -sh .gpu-carry | cut -f1))"
