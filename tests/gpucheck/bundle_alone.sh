#!/usr/bin/env bash
# `make gpu-bundle`'s one file builds Cadre alone (issue #54): the bundle is made, and made again
# as on a fresh machine (no apt lists, an empty HOME) to the same bytes; then, in a mount
# namespace where the host's copies of the bundle's -dev packages are hidden (overlayfs whiteouts
# over /usr/include, /usr/lib/x86_64-linux-gnu, /usr/share/cmake, /usr/share/pkgconfig) and a
# network namespace with no route out, scripts/gpu_build.sh unpacks the tar, configures a libtorch
# 2.x build and compiles files that include the dependencies' headers, which must then come from
# the unpacked bundle. On this machine every -dev package is installed, so anything weaker would
# prove nothing. Exit 0 only when every check holds; the namespaces vanish with the process.
#   bundle_alone.sh ROOT OUT PYTHON
set -uo pipefail
root=$1 out=$2 python=$3
fail() { echo "gpu-bundle check: FAILED: $*"; exit 1; }

if [[ ${1:-} != --inside ]]; then
  rm -rf "$out"; mkdir -p "$out"
  bash "$root/scripts/gpu_bundle.sh" "$out/gpu-bundle.tar" >"$out/bundle.log" 2>&1 || { cat "$out/bundle.log"; fail "make gpu-bundle"; }
  cat "$out/bundle.log"
  size=$(stat -c %s "$out/gpu-bundle.tar")
  ((size <= 64 * 1024 * 1024)) || fail "the bundle is $size bytes, over 64 MiB"
  bad=$(tar -tf "$out/gpu-bundle.tar" | grep -E '[%~:]') && fail "names a carry may not keep: $bad"
  # As on a fresh machine: no apt lists (apt-get update runs, in this namespace only) and an empty
  # HOME (gloo fetched from its pinned URL and checked); the same bytes come out.
  mkdir -p "$out/fresh-home"
  unshare --mount bash -c 'mount --make-rprivate / && mount -t tmpfs tmpfs /var/lib/apt/lists &&
    mkdir -p /var/lib/apt/lists/partial && HOME=$1 bash "$2/scripts/gpu_bundle.sh" "$3"' _ \
    "$out/fresh-home" "$root" "$out/fresh.tar" >"$out/fresh.log" 2>&1 || { cat "$out/fresh.log"; fail "the bundle from a fresh state"; }
  [[ -f $out/fresh-home/.cache/cadre/gloo-0.0~git20250912.d97133a/.setup-sha256 ]] || fail "gloo was not fetched into the empty HOME"
  cmp -s "$out/gpu-bundle.tar" "$out/fresh.tar" || fail "the bundle made from a fresh state differs: $(sha256sum "$out"/*.tar)"
  echo "gpu-bundle check: the same bytes from empty apt lists and an empty HOME"
  # The -dev packages the bundle carries, minus the toolchain's own (glibc's and the kernel's
  # headers, which the compiler needs and the bundle does not replace).
  tar -xOf "$out/gpu-bundle.tar" MANIFEST | sed -n 's|.*  debs/\(.*-dev\)\.deb$|\1|p' |
    grep -vE '^(linux-libc-dev|libc6-dev|libcrypt-dev|libnsl-dev|libtirpc-dev)$' >"$out/hidden-packages"
  [[ -s $out/hidden-packages ]] || fail "no -dev package in the bundle's MANIFEST"
  for p in $(cat "$out/hidden-packages"); do dpkg -L "$p" 2>/dev/null; done |
    grep -E '^/usr/(include|lib/x86_64-linux-gnu|share/cmake|share/pkgconfig)/' | sort -u >"$out/hidden-files"
  exec unshare --mount --net --fork bash "$0" --inside "$root" "$out" "$python"
fi
shift
root=$1 out=$2 python=$3

# --- inside: hide the host's copies, check the hiding and that nothing is reachable ---------------
mount --make-rprivate / || fail "mount --make-rprivate"
mkdir -p "$out/overlays" && mount -t tmpfs tmpfs "$out/overlays" || fail "a tmpfs for the overlays"
hidden=0
for dir in /usr/include /usr/lib/x86_64-linux-gnu /usr/share/cmake /usr/share/pkgconfig; do
  [[ -d $dir ]] || continue
  upper=$out/overlays${dir}/upper work=$out/overlays${dir}/work
  mkdir -p "$upper" "$work"
  while read -r f; do
    [[ -f $f || -L $f ]] || continue  # directories stay, empty
    mkdir -p "$upper$(dirname "${f#"$dir"}")"
    mknod "$upper${f#"$dir"}" c 0 0 || fail "a whiteout for $f"
    hidden=$((hidden + 1))
  done < <(grep "^$dir/" "$out/hidden-files")
  mount -t overlay overlay -o "lowerdir=$dir,upperdir=$upper,workdir=$work" "$dir" || fail "the overlay over $dir"
done
echo "gpu-bundle check: $hidden files of $(wc -l <"$out/hidden-packages") -dev packages hidden"
for f in /usr/include/yaml-cpp/yaml.h /usr/include/nlohmann/json.hpp /usr/include/httplib.h /usr/include/oneapi/dnnl/dnnl.h \
         /usr/lib/x86_64-linux-gnu/libyaml-cpp.so /usr/include/sentencepiece_processor.h; do
  [[ ! -e $f ]] || fail "$f is still visible"
done
"$python" -c 'import socket; socket.create_connection(("deb.debian.org", 80), timeout=5)' 2>/dev/null &&
  fail "the network is reachable"

# --- the build, from the tar alone ----------------------------------------------------------------
# Objects whose headers come from yaml-cpp and nlohmann-json (CMake packages), cpp-httplib and
# OpenSSL (pkg-config); and the SentencePiece shim, a shared library linked against the bundle.
objects=(src/core/CMakeFiles/cadre_core.dir/config.cpp.o src/rdzv/CMakeFiles/cadre_rdzv.dir/etcd_client.cpp.o
         src/data/CMakeFiles/cadre_spm.dir/spm_shim.cpp.o)
PYTHON=$python CADRE_GPU_BUNDLE=$out/gpu-bundle.tar CADRE_GPU_DEPS=$out/deps GPU_BUILD_TARGETS="${objects[*]} cadre_spm" \
  bash "$root/scripts/gpu_build.sh" "$out/build" -DCADRE_CUDA=OFF >"$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; fail "gpu_build.sh from the bundle"; }
deps=$out/deps/root
grep -q "^yaml-cpp_DIR:PATH=$deps/" "$out/build/CMakeCache.txt" ||
  fail "yaml-cpp was not found in the bundle: $(grep '^yaml-cpp_DIR' "$out/build/CMakeCache.txt")"
for o in "${objects[@]}"; do
  headers=$(ninja -C "$out/build" -t deps "$o") || fail "no dependency record for $o"
  grep -q "$deps/usr/include" <<<"$headers" || fail "$o includes nothing from the bundle"
  from_host=$(grep -E '^ +/usr/include/(yaml-cpp|nlohmann|sentencepiece|httplib|openssl|oneapi)' <<<"$headers")
  [[ -z $from_host ]] || fail "$o includes the host's headers: $from_host"
  echo "gpu-bundle check: $o: $(grep -c "$deps/usr/include" <<<"$headers") headers from the bundle"
done
# The bundle's libraries reach the binary through DT_RPATH (not RUNPATH, not a library path).
shim=$(find "$out/build" -name 'libcadre_spm.so' | head -1)
[[ -n $shim ]] || fail "no libcadre_spm.so built"
readelf -d "$shim" | grep -q "(RPATH).*$deps/usr/lib/x86_64-linux-gnu" ||
  fail "$shim has no DT_RPATH to the bundle: $(readelf -d "$shim" | grep -E 'RPATH|RUNPATH')"
resolved=$(env -u LD_LIBRARY_PATH ldd "$shim" | grep libsentencepiece)
[[ $resolved == *"$deps/"* ]] || fail "libsentencepiece resolves outside the bundle: $resolved"
echo "gpu-bundle check: $shim loads $(awk '{print $3}' <<<"$resolved" | head -1)"
echo "gpu-bundle check: passed"
