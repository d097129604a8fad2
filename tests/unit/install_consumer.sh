#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the build into a temporary root and builds a small program against it
# with only pkg-config's flags: headers, libgrex.so and grex.pc must be usable.
#   install_consumer.sh BUILD_DIR CXX [SANITIZE]   (SANITIZE: meson's b_sanitize, e.g. address,undefined)
set -euo pipefail
build=$1
cxx=$2
sanitize=${3:-none}
extra=()
# A sanitized libgrex needs a consumer built with the same runtime.
[[ $sanitize != none && -n $sanitize ]] && extra=(-fsanitize="$sanitize")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --destdir "$tmp" --no-rebuild --quiet >/dev/null
pc=$(find "$tmp" -name grex.pc | head -1)
[[ -n "$pc" ]] || { echo "FAIL: grex.pc not installed"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$pc")
# Point the installed .pc at the temporary root.
sed "s|^prefix=.*|prefix=$tmp$prefix|" "$pc" > "$tmp/grex.pc"
flags=$(PKG_CONFIG_PATH=$tmp pkg-config --cflags --libs grex)
cat > "$tmp/consumer.cc" <<'CC'
#include <grex/communicator.h>
#include <cstdio>
int main() {
  auto drivers = grex::Device::available_drivers();
  grex::Error e = grex::Error(grex::Errc::kTimeout, "probe").rank(1).peer(2);
  bool shm = false;
  for (auto& d : drivers) shm |= d == "shm";
  std::printf("drivers: %zu, shm: %d, %s\n", drivers.size(), shm, e.message().c_str());
  return shm && e.message() == "rank 1 -> peer 2: probe" ? 0 : 1;
}
CC
# shellcheck disable=SC2086
"$cxx" -std=c++20 "${extra[@]}" "$tmp/consumer.cc" -o "$tmp/consumer" $flags
libdir=$(dirname "$(find "$tmp" -name 'libgrex.so' | head -1)")
LD_LIBRARY_PATH=$libdir "$tmp/consumer"
for tool in grex-run grex-perf grex-store train; do
  [[ -x $(find "$tmp" -name "$tool" -type f | head -1) ]] || { echo "FAIL: $tool not installed"; exit 1; }
done
# The tools link libgrex.so too (public API only) and find it through their
# rpath where it was installed.
grex_run=$(find "$tmp" -name grex-run -type f | head -1)
readelf -d "$grex_run" | grep -qE "R(UN)?PATH.*\[$prefix/" || { echo "FAIL: grex-run has no rpath into $prefix"; exit 1; }
LD_LIBRARY_PATH=$libdir "$grex_run" --version | grep -q '^grex-run ' || { echo "FAIL: installed grex-run --version"; exit 1; }
echo "PASS"
