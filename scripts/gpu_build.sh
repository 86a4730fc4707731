#!/usr/bin/env bash
# Configures and builds Cadre for `make gpu-check` (scripts/gpu_check.sh) against the PyTorch of
# the python on PATH (the GPU machine's own, with CUDA), without any registry: the Debian
# packages Cadre builds against and the gloo sources come from the one file `make gpu-bundle`
# wrote (scripts/gpu_bundle.sh: .dev/gpu-bundle.tar), unpacked under .dev/ (never installed).
# The bundle's libraries reach Cadre's binaries alone, through their DT_RPATH (which, unlike
# RUNPATH, also serves the libraries they load): no library path is exported, so nothing else
# (the PyTorch peer, the torch wheel's own libraries) sees them. Without a bundle (a machine set
# up by scripts/setup.sh) the system's packages are used.
#   scripts/gpu_build.sh BUILD_DIR [extra cmake args, e.g. -DCADRE_CUDA=ON]
# Environment: PYTHON (default python3); GPU_BUILD_TARGETS, the targets to build (default all;
# "none": configure only); CADRE_GPU_BUNDLE (default .dev/gpu-bundle.tar) and CADRE_GPU_DEPS
# (where it is unpacked; default .dev/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: gpu_build.sh BUILD_DIR [cmake args]}; shift
python=${PYTHON:-python3}
bundle=${CADRE_GPU_BUNDLE:-$root/.dev/gpu-bundle.tar}
unpacked=${CADRE_GPU_DEPS:-$root/.dev}
prefix_path=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
extra=()

# Unpacks the bundle once per content: its files under $unpacked/bundle (checked against its
# MANIFEST), its packages into $unpacked/root.
unpack_bundle() {
  local sum
  sum=$(sha256sum "$bundle" | cut -d' ' -f1)
  [[ "$(cat "$unpacked/root/.unpacked" 2>/dev/null)" == "$sum" ]] && return 0
  rm -rf "$unpacked/bundle" "$unpacked/root"
  mkdir -p "$unpacked/bundle" "$unpacked/root"
  tar -xf "$bundle" -C "$unpacked/bundle"
  (cd "$unpacked/bundle" && sha256sum --quiet --strict -c MANIFEST) ||
    { echo "gpu_build: $bundle does not match its MANIFEST (damaged in transit?)" >&2; exit 1; }
  for f in "$unpacked"/bundle/debs/*.deb; do dpkg-deb -x "$f" "$unpacked/root"; done
  echo "$sum" >"$unpacked/root/.unpacked"
}

if [[ -f $bundle ]]; then
  unpack_bundle
  deps=$unpacked/root
  lib=$deps/usr/lib/x86_64-linux-gnu
  # The bundle's pkg-config, finding its own library and only the bundle's .pc files.
  cat >"$deps/pkg-config" <<WRAP
#!/bin/sh
LD_LIBRARY_PATH="$lib" exec "$deps/usr/bin/pkgconf" "\$@"
WRAP
  chmod +x "$deps/pkg-config"
  export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$deps/usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$deps
  unset PKG_CONFIG_PATH
  prefix_path="$prefix_path;$deps/usr;$lib/cmake"
  # Before the compiler's own /usr/include/x86_64-linux-gnu and /usr/include: a -dev package's
  # headers there (OpenSSL's opensslconf.h is in the multiarch one) have no -I from pkg-config.
  includes="-isystem $deps/usr/include/x86_64-linux-gnu -isystem $deps/usr/include"
  extra+=(-DCMAKE_CXX_FLAGS="$includes" -DCMAKE_C_FLAGS="$includes")
  extra+=(-DCMAKE_LIBRARY_PATH="$lib" -DCMAKE_INCLUDE_PATH="$deps/usr/include" -DPKG_CONFIG_EXECUTABLE="$deps/pkg-config"
          -DCMAKE_BUILD_RPATH="$lib" -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags
          -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--disable-new-dtags -DCADRE_GLOO_SOURCE_DIR="$unpacked/bundle/gloo")
fi
[[ -d /usr/local/cuda/bin ]] && export PATH=/usr/local/cuda/bin:$PATH CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix_path" \
  -DCADRE_VENV_PYTHON="$(command -v "$python")" -DCADRE_BENCH=OFF -DCADRE_FUZZ=OFF "${launcher[@]}" "${extra[@]}" "$@"
targets=(${GPU_BUILD_TARGETS:-all})
[[ ${targets[*]} == none ]] && exit 0
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
