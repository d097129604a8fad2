#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds, on this host, what device-check.sh runs on a GPU machine that has no
# Debian packages (the device tool's image: nvcc, torch, g++, no OpenSSL
# headers, DPDK or rdma-core): libgrex, collectives_gpu_check, grex-perf and
# grex-run from a build
# without dpdk and verbs (they then need only libc, libstdc++ and
# libcrypto.so.3), copied into .gpu-carry/ (git ignores it through
# .git/info/exclude). Then, with the device tool:
#   run  command: bash tests/gpu/device-check.sh   carry: [".gpu-carry"]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${GREX_GPU_BUILD_DIR:-build-gpu}
if [[ ! -f $build/build.ninja ]]; then
  meson setup "$build" -Ddpdk=disabled -Dverbs=disabled -Dtorch=disabled -Dbenchmarks=disabled --buildtype=release
fi
ninja -C "$build" tests/gpu/collectives_gpu_check libgrex.so.0.1.0 apps/grex-perf/grex-perf apps/grex-run/grex-run
grep -qx '/.gpu-carry/' .git/info/exclude 2>/dev/null || echo '/.gpu-carry/' >> .git/info/exclude
rm -rf .gpu-carry && mkdir .gpu-carry
cp "$build/tests/gpu/collectives_gpu_check" .gpu-carry/
cp "$build/libgrex.so.0.1.0" .gpu-carry/libgrex.so.0
cp "$build/apps/grex-perf/grex-perf" "$build/apps/grex-run/grex-run" .gpu-carry/
git rev-parse --short HEAD > .gpu-carry/built-from
git diff --quiet HEAD -- lib tests/gpu python || echo "(plus uncommitted changes)" >> .gpu-carry/built-from
echo "prepare-carry: .gpu-carry holds $(ls .gpu-carry | tr '\n' ' ')($(du -sh .gpu-carry | cut -f1))"
