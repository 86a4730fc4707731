#!/usr/bin/env bash
# `make gpu-bundle`: what the GPU machine needs beside the working tree, in one file a device call
# carries (it reaches no registry and takes at most 64 MiB of carried files; docs/gpu.md):
#   debs/<package>.deb  the Debian packages Cadre builds against, downloaded (not installed),
#                       named by package alone (a carry may not keep the `%3a` and `~` of apt's names)
#   gloo/               the gloo sources matching torch 2.11's gloo (scripts/fetch_gloo.sh: its
#                       pinned URL and sha256)
#   MANIFEST            the sha256 of every file above
# The tar is reproducible (sorted, mtime 0, owner 0): the same packages give the same bytes.
# scripts/gpu_build.sh unpacks it on the GPU machine.
#
# The package list is scripts/setup.sh's own `packages=(...)` (the one list, also the
# Dockerfile's): every -dev package there except those the GPU build does not use (libtorch-dev:
# the GPU machine's PyTorch is the libtorch; libgloo-dev: libtorch 2.x carries its gloo, whose
# headers come from gloo/; libbenchmark-dev, libclang-rt-14-dev: no benchmarks or fuzzers in that
# build), plus what those -dev packages depend on, two levels down (their shared libraries), and
# pkg-config.
#   gpu_bundle.sh [OUT]   (default .dev/gpu-bundle.tar; .dev/ is in .gitignore)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd); cd "$root"
out=${1:-$root/.dev/gpu-bundle.tar}
limit_mib=64
skip=" libtorch-dev libgloo-dev libbenchmark-dev libclang-rt-14-dev "
list=$(sed -n '/^packages=(/,/^)/p' scripts/setup.sh | sed 's/#.*//' | tr ' ' '\n' | grep -- '-dev$' || true)
wanted=()
for p in $list; do [[ $skip == *" $p "* ]] || wanted+=("$p"); done
((${#wanted[@]})) || { echo "gpu_bundle: no -dev packages found in scripts/setup.sh's packages=(...)" >&2; exit 1; }
# apt's lists are judged by what they hold (can apt name a source to download each package
# from?), not by file names, which depend on the compression apt was set up with (.lz4 on these
# machines); `apt-cache show` is not enough either: its binary cache outlives deleted lists.
apt-get download --print-uris "${wanted[@]}" >/dev/null 2>&1 || apt-get update -qq
depends() {  # the direct Depends of the given packages, without the C library and compiler runtime
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "$@" 2>/dev/null |
    sed -n 's/^ *Depends: //p' | grep -v '^<' | grep -vE '^(libc6|libc6-dev|libgcc-s1|libstdc\+\+6|libstdc\+\+-.*-dev)$' | sort -u
}
level1=$(depends "${wanted[@]}")
level2=$(depends $level1)
all=$(printf '%s\n' "${wanted[@]}" $level1 $level2 pkgconf pkgconf-bin libpkgconf3 | sort -u)

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs"
(cd "$work/debs" && apt-get download -q $all >"$work/download.log" 2>&1) ||
  { grep -v '^W:' "$work/download.log" | tail -5 >&2; echo "gpu_bundle: apt-get download failed" >&2; exit 1; }
shopt -s nullglob
for f in "$work"/debs/*.deb; do
  package=$(dpkg-deb -f "$f" Package) || { echo "gpu_bundle: $f is not a Debian package" >&2; exit 1; }
  mv "$f" "$work/debs/$package.deb"
done
missing=()
for p in $all; do [[ -f $work/debs/$p.deb ]] || missing+=("$p"); done
((${#missing[@]} == 0)) || { echo "gpu_bundle: apt-get download did not fetch: ${missing[*]}" >&2; exit 1; }

gloo=${GLOO_SOURCE_DIR:-$(bash "$root/scripts/fetch_gloo.sh")}
[[ -f $gloo/gloo/config.h.in ]] || { echo "gpu_bundle: no gloo sources at $gloo" >&2; exit 1; }
cp -r "$gloo" "$work/gloo"
(cd "$work" && find debs gloo -type f | LC_ALL=C sort | xargs sha256sum >MANIFEST)

mkdir -p "$(dirname "$out")"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu -C "$work" -cf "$out.partial" MANIFEST debs gloo
size=$(stat -c %s "$out.partial")
if ((size > limit_mib * 1024 * 1024)); then
  rm -f "$out.partial"
  echo "gpu_bundle: the bundle would be $((size / 1048576)) MiB, over the $limit_mib MiB a device call carries" >&2
  exit 1
fi
mv "$out.partial" "$out"
echo "gpu_bundle: $(ls "$work/debs" | wc -l) packages for ${wanted[*]}, and the gloo sources"
echo "gpu_bundle: $out ($((size / 1024)) KiB, sha256 $(sha256sum "$out" | cut -d' ' -f1))"
