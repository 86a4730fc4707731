#!/usr/bin/env bash
# Cadre as a library: install it into a temporary prefix, build examples/custom_module out of
# tree against the installed package (find_package(Cadre), Cadre::cadre), run it with FULL_SHARD
# on 2 ranks under the installed `cadre run`, and check that each rank holds half of the
# parameters and that the loss falls.
# Usage: custom_module_test.sh <cadre build dir> <cadre source dir>
set -euo pipefail
build=$1 source=$2
work=$(mktemp -d /tmp/cadre-example-XXXXXX)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
# The libtorch the build used (CMAKE_PREFIX_PATH: the torch wheel's, in a libtorch 2.x build).
torch_prefix=$(sed -n 's/^CMAKE_PREFIX_PATH:[A-Z]*=//p' "$build/CMakeCache.txt")
cmake -S "$source/examples/custom_module" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix${torch_prefix:+;$torch_prefix}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
"$work/prefix/bin/cadre" run --nproc-per-node 2 -- "$work/build/custom_module" 60 >"$work/run.log" 2>&1 ||
  { cat "$work/run.log"; exit 1; }
cat "$work/run.log"

# Rank 0 holds half of the parameters (FULL_SHARD pads each unit to an even count).
read -r held total < <(sed -n 's/.*rank 0 holds \([0-9]*\) of \([0-9]*\) parameters.*/\1 \2/p' "$work/run.log")
[[ -n "${held:-}" ]] || { echo "FAIL: no shard size line"; exit 1; }
(( 2 * held >= total && 2 * held <= total + 16 )) || { echo "FAIL: rank 0 holds $held of $total"; exit 1; }

# The mean loss of the last 10 steps is under half that of the first 10.
awk '/step [0-9]+ loss/ { for (i = 1; i <= NF; ++i) if ($i == "loss") l[n++] = $(i + 1) }
     END {
       if (n != 60) { print "FAIL: " n " loss lines, expected 60"; exit 1 }
       for (i = 0; i < 10; ++i) { first += l[i]; last += l[n - 1 - i] }
       printf "first 10 steps: mean loss %.4f; last 10: %.4f\n", first / 10, last / 10
       if (last > 0.5 * first) { print "FAIL: the loss did not fall"; exit 1 }
     }' "$work/run.log"
echo "ok: installed package, out-of-tree build, FULL_SHARD on 2 ranks"
