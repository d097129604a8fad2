#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages grex needs to build and test, only those missing.
#   install-deps.sh [--bench] [--coverage]   (--bench adds Open MPI for the comparison benchmarks,
#   --coverage gcovr for run-tests.sh --coverage)
set -euo pipefail
pkgs=(g++ meson ninja-build pkg-config python3 libssl-dev libgtest-dev libgmock-dev libbenchmark-dev iproute2
      dpdk-dev libdpdk-dev libibverbs-dev librdmacm-dev ibverbs-providers gnuplot-nox openmpi-bin
      python3-venv python3-dev nlohmann-json3-dev libcli11-dev clang libclang-rt-dev)
# gnuplot-nox draws grex-perf --plot and the benchmark plots (its test checks the PNG);
# openmpi-bin runs the C API under mpirun (capi_mpirun); the PyTorch backend builds
# against torch 2 from tests/scripts/venv.sh (its headers carry pybind11) with python3-dev's
# headers; python3-venv gives that venv, and test python_pip the venv
# that `pip install .` goes into; nlohmann-json3-dev and libcli11-dev
# give the tools their JSON writer and command-line parser; clang and
# libclang-rt-dev (libFuzzer) build the fuzz targets in tests/fuzz, which
# would otherwise silently not exist on a fresh machine.
# The verbs suite's Soft-RoCE VM (tests/scripts/softroce.sh) installs qemu,
# busybox and the kernel it boots itself, only when it needs them.
for arg in "$@"; do
  [[ "$arg" == "--bench" ]] && pkgs+=(libopenmpi-dev)
  [[ "$arg" == "--coverage" ]] && pkgs+=(gcovr)
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
