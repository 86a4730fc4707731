#!/usr/bin/env bash
# Prepares `.dev/` for the GPU machine, which reaches no registry (docs/gpu.md): the Debian
# packages Cadre builds against, downloaded (not installed) into .dev/debs, and the gloo
# sources matching torch 2.11's gloo into .dev/gloo-*. The GPU machine's scripts/gpu_build.sh
# unpacks them. Run it here, from the project root, then carry `.dev` (the device tool's carry).
#
# The package list is scripts/setup.sh's own `packages=(...)` (the one list, also the
# Dockerfile's): every -dev package there except those the GPU build does not use (libtorch-dev:
# the GPU machine's PyTorch is the libtorch; libgloo-dev: libtorch 2.x carries its gloo, whose
# headers come from .dev/gloo; libbenchmark-dev, libclang-rt-14-dev: no benchmarks or fuzzers
# in that build), plus what those -dev packages depend on, two levels down (their shared
# libraries), and pkg-config.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd); cd "$root"   # .dev/ is in .gitignore
skip=" libtorch-dev libgloo-dev libbenchmark-dev libclang-rt-14-dev "
list=$(sed -n '/^packages=(/,/^)/p' scripts/setup.sh | sed 's/#.*//' | tr ' ' '\n' | grep -- '-dev$' || true)
wanted=()
for p in $list; do [[ $skip == *" $p "* ]] || wanted+=("$p"); done
((${#wanted[@]})) || { echo "gpu_bundle: no -dev packages found in scripts/setup.sh's packages=(...)" >&2; exit 1; }
ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1 || apt-get update -qq
depends() {  # the direct Depends of the given packages, without the C library and compiler runtime
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "$@" 2>/dev/null |
    sed -n 's/^ *Depends: //p' | grep -v '^<' | grep -vE '^(libc6|libc6-dev|libgcc-s1|libstdc\+\+6|libstdc\+\+-.*-dev)$' | sort -u
}
level1=$(depends "${wanted[@]}")
level2=$(depends $level1)
all=$(printf '%s\n' "${wanted[@]}" $level1 $level2 pkgconf pkgconf-bin libpkgconf3 | sort -u)
rm -rf .dev/debs; mkdir -p .dev/debs
(cd .dev/debs && apt-get download -q $all 2>&1 | grep -v '^W:' | tail -1)
echo "gpu_bundle: $(ls .dev/debs | wc -l) packages for ${wanted[*]}"
# The gloo sources the libtorch 2.x build uses by default (src/comm/CMakeLists.txt), which
# `scripts/setup.sh --torch` unpacks; GLOO_SOURCE_DIR names another.
gloo=${GLOO_SOURCE_DIR:-$HOME/.cache/cadre/gloo-0.0~git20250912.d97133a}
[[ -f $gloo/gloo/config.h.in ]] || { echo "gpu_bundle: no gloo sources at $gloo (run scripts/setup.sh --torch here first)" >&2; exit 1; }
rm -rf .dev/gloo-*; cp -r "$gloo" .dev/
du -sh .dev
