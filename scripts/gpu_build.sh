#!/usr/bin/env bash
# Configures and builds Cadre for `make gpu-check` (scripts/gpu_check.sh) against the PyTorch of
# the python on PATH (the GPU machine's own, with CUDA), without any registry: the Debian
# packages Cadre builds against come from `.dev/debs` (scripts/gpu_bundle.sh, unpacked under
# .dev/root, never installed) and the gloo headers from `.dev/gloo`. On a machine set up by
# scripts/setup.sh, where there is no .dev/, the system's packages are used.
#   scripts/gpu_build.sh BUILD_DIR [extra cmake args, e.g. -DCADRE_CUDA=ON]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: gpu_build.sh BUILD_DIR [cmake args]}; shift
python=${PYTHON:-python3}
prefix_path=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
extra=()
if compgen -G "$root/.dev/debs/*.deb" >/dev/null; then
  deps="$root/.dev/root"
  if [[ ! -f $deps/.unpacked ]]; then
    mkdir -p "$deps"
    for f in "$root"/.dev/debs/*.deb; do dpkg -x "$f" "$deps"; done
    touch "$deps/.unpacked"
  fi
  lib=$deps/usr/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$lib:${LD_LIBRARY_PATH:-} PATH=$deps/usr/bin:$PATH
  export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$deps
  prefix_path="$prefix_path;$deps/usr;$lib/cmake"
  extra+=(-DCMAKE_LIBRARY_PATH="$lib" -DCMAKE_INCLUDE_PATH="$deps/usr/include")
fi
gloo=$(compgen -G "$root/.dev/gloo-*" | head -1 || true)
[[ -n $gloo ]] && extra+=(-DCADRE_GLOO_SOURCE_DIR="$gloo")
[[ -d /usr/local/cuda/bin ]] && export PATH=/usr/local/cuda/bin:$PATH CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix_path" \
  -DCADRE_VENV_PYTHON="$(command -v "$python")" -DCADRE_BENCH=OFF -DCADRE_FUZZ=OFF "${launcher[@]}" "${extra[@]}" "$@"
cmake --build "$build" -j"$(nproc)"
