#!/bin/bash
# The installed package is what a user gets: install this build into a temporary prefix, check
# that every public header compiles on its own, build examples/ as a separate CMake project with
# find_package(gradsync), build example 1 again with pkg-config, and run it alone and as a job
# of three processes.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR GRADSYNC_BIN
set -euo pipefail
build=$1 source=$2 gradsync=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

step() { echo "== $*"; }

step "cmake --install into $prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/lib/cmake/gradsync/gradsyncConfig.cmake"
test -f "$prefix/lib/pkgconfig/gradsync.pc"

step "each public header compiles alone"
for header in "$prefix"/include/gradsync/*.h; do
  name=gradsync/$(basename "$header")
  echo "#include <$name>" | g++ -std=c++20 -fsyntax-only -Wall -Wextra -Werror \
    -I"$prefix/include" -x c++ - || { echo "FAIL: <$name> is not self-contained"; exit 1; }
done

step "examples/ against find_package(gradsync)"
cmake -S "$source/examples" -B "$work/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/examples" >/dev/null

step "example 1 with pkg-config"
PKG_CONFIG_PATH=$prefix/lib/pkgconfig
export PKG_CONFIG_PATH
# shellcheck disable=SC2046  # pkg-config prints several words on purpose
g++ -O2 "$source/examples/01_allreduce/allreduce.cc" -o "$work/allreduce_pc" \
  $(pkg-config --cflags --libs gradsync)

step "run: one process, then three"
"$work/examples/01_allreduce" | tee "$work/one.txt"
grep -q "rank 0 of 1 (local 0 of 1): average 1 " "$work/one.txt"
"$gradsync" launch -n 3 -- "$work/allreduce_pc" | tee "$work/three.txt"
test "$(grep -c "of 3 (local .* of 3): average 2 " "$work/three.txt")" = 3
echo "install_test: passed"
