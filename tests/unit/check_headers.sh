#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every public header compiles on its own (includes what it uses).
#   check_headers.sh CXX SOURCE_ROOT
set -euo pipefail
cxx=$1
root=$2
fail=0
for h in "$root"/lib/include/grex/*.h; do
  name=grex/$(basename "$h")
  if ! echo "#include <$name>" | "$cxx" -std=c++20 -Wall -Wextra -Werror -fsyntax-only -I "$root/lib/include" -x c++ -; then
    echo "FAIL: $name does not compile on its own"
    fail=1
  else
    echo "ok: $name"
  fi
done
exit $fail
