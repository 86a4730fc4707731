#!/usr/bin/env bash
# `scripts/setup.sh --torch`: what the libtorch 2.x build (`make test-torch2`) and the tests that
# use the real PyTorch 2.x / transformers need, after setup.sh has made the project venv:
#   1. python/requirements-torch.txt (torch 2.11.0 and its CUDA 13 nvidia-* wheels, torchvision,
#      transformers, safetensors) into the project venv, after checking the disk;
#   2. the gloo headers matching the gloo inside that torch's libtorch_cpu.so (scripts/fetch_gloo.sh:
#      Debian's source tarball of gloo d97133a, sha256-pinned, unpacked under ~/.cache/cadre).
# Idempotent: a stamp in the venv and one in the gloo folder; a second run takes about a second.
# Usage: setup_torch.sh VENV
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:?usage: setup_torch.sh VENV}

# --- 1. PyPI's torch 2.11 and the Python references ------------------------------------------
requirements="$here/python/requirements-torch.txt"
stamp="$venv/.setup-requirements-torch.txt"
# Measured (docs/TORCH2.md): pip downloads 2.65 GB of wheels, which become 4.95 GB in the venv,
# and holds every downloaded wheel in its temporary directory (TMPDIR) until the install ends
# (peak 7.8 GB with both on one file system); where pip's cache is on, it keeps another copy
# there. Rounded up, plus a 0.5 GB margin: 10.9 GB when venv, cache and TMPDIR share a disk.
installed_mb=5000 download_mb=2700 margin_mb=500

# The mount point and free MiB of the file system holding PATH (or its nearest existing parent).
fs_of() {
  local p=$1
  while [[ ! -e $p ]]; do p=$(dirname "$p"); done
  df -Pm "$p" | awk 'NR == 2 { print $6, $4 }'
}

check_disk() {
  local pip_cache tmp
  tmp=${TMPDIR:-/tmp}
  pip_cache=$("$venv/bin/python" -m pip cache dir 2>/dev/null || true)   # empty when caching is off
  declare -A need=() free=() what=()
  add() {  # add PATH MB LABEL
    local mount avail
    read -r mount avail < <(fs_of "$1")
    need[$mount]=$(( ${need[$mount]:-$margin_mb} + $2 ))
    free[$mount]=$avail
    what[$mount]="${what[$mount]:+${what[$mount]} + }$3 ($1) $(awk -v m="$2" 'BEGIN { printf "%.1f GB", m / 1000 }')"
  }
  add "$venv" "$installed_mb" "installed into the venv"
  [[ -n $pip_cache ]] && add "$pip_cache" "$download_mb" "pip's cache"
  add "$tmp" "$download_mb" "pip's temporary copies"
  local mount short=0
  for mount in "${!need[@]}"; do
    if (( free[$mount] < need[$mount] )); then
      awk -v f="${free[$mount]}" -v n="${need[$mount]}" -v m="$mount" -v w="${what[$mount]}" -v v="$venv" 'BEGIN {
        printf "setup: not enough disk to install torch 2.11 (python/requirements-torch.txt) into %s:\n", v
        printf "setup:   the file system at %s has %.1f GB free and needs %.1f GB: %s + 0.5 GB margin\n", m, f / 1000, n / 1000, w
      }' >&2
      short=1
    fi
  done
  if ((short)); then
    echo "setup: free space there, or put the venv (CADRE_VENV), pip's cache (PIP_CACHE_DIR) or TMPDIR elsewhere" >&2
    exit 1
  fi
}

pins() { grep -v -E '^[[:space:]]*(#|$)' "$1" 2>/dev/null || true; }   # as in setup.sh
if [[ ! -f "$stamp" || "$(pins "$requirements")" != "$(pins "$stamp")" ]]; then
  check_disk
  echo "setup: installing $(grep -v '^#' "$requirements" | tr '\n' ' ')into $venv"
  echo "setup:   a first run downloads 2.65 GB from PyPI (torch 0.53 GB, the nvidia-* CUDA 13 libraries 1.9 GB,"
  echo "setup:   triton 0.19 GB, the rest 0.05 GB) and installs 4.95 GB: ~5 min of download here, ~9 min to install"
  start=$SECONDS
  # Only pip's lines naming what it fetches (or takes from its cache) and what it installed.
  "$venv/bin/python" -m pip install --no-input --disable-pip-version-check --progress-bar off -r "$requirements" |
    { grep -E --line-buffered '^ *(Downloading|Using cached|Successfully installed)' || true; } ||
    { echo "setup: pip could not install $requirements into $venv (is PyPI reachable? pip's error is above)" >&2; exit 1; }
  cp "$requirements" "$stamp"
  echo "setup: torch requirements installed in $((SECONDS - start)) s"
fi

# --- 2. gloo headers ----------------------------------------------------------------------------
bash "$here/scripts/fetch_gloo.sh" "$venv/bin/python" >/dev/null
