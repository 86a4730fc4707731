#!/usr/bin/env bash
# Installs everything Cadre needs on a Debian bookworm machine: Debian's packages and the
# project venv from PyPI. The data sets are committed under third_party/.
#   --torch  also the libtorch 2.x build's needs (`make test`, `make test-torch2`): PyPI's torch
#            2.11 and the Python references (python/requirements-torch.txt) into the same venv,
#            and the gloo headers matching the gloo inside that torch (see src/comm/CMakeLists.txt).
# Idempotent: when every package and the venv are present it returns in about a second.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
with_torch=0
for arg in "$@"; do
  case "$arg" in
    --torch) with_torch=1 ;;
    *) echo "setup: unknown option '$arg' (the only option is --torch)" >&2; exit 2 ;;
  esac
done

# The Dockerfile installs the same list (tests/deploy/dockerfile_test.py checks it).
packages=(
  build-essential cmake pkg-config ninja-build
  libtorch-dev python3-torch libopenblas0-openmp   # libtorch + the Python reference; OpenBLAS, not reference BLAS
  python3-torchvision                               # the ResNet reference (parity test, images/s peer)
  libdnnl-dev                                       # oneDNN sgemm for float32 linears
  libgloo-dev                                       # flat all-gather / reduce-scatter that c10d lacks
  libblas3 util-linux                               # reference BLAS + taskset: the doctor tests' slow BLAS and busy core
  libsentencepiece-dev sentencepiece                # tokenizer training and encoding
  nlohmann-json3-dev libyaml-cpp-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-matplotlib python3-numpy                  # plots and the Python peer
  slurm-wlm munge                                   # `srun cadre run` test on a private two-node cluster
  etcd-server etcd-client                           # etcd rendezvous tests (a real etcd, started by the tests)
  iproute2 iptables                                 # network-namespace hosts for the multi-node fault tests
  prometheus tmux chromium python3-pil              # obs and serve tests: a real Prometheus, promtool, `cadre top` under
                                                    # tmux, the HTML report rendered and its screenshot read
  libssl-dev                                        # HMAC-SHA256 for the job store's handshake (libcrypto)
  libturbojpeg0-dev libpng-dev                      # JPEG (TurboJPEG API, DCT-scaled) and PNG decoding of image folders
  clang-14 libclang-rt-14-dev                       # libFuzzer and sanitizer runtimes for tests/fuzz
  python3-venv                                      # Debian's python3.11 can make the project venv
)
missing=()
for p in "${packages[@]}"; do
  [[ $p == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# libtorch must use OpenBLAS: the reference BLAS runs ~30x slower (see docs/DESIGN.md).
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || true)
case "$blas" in
  *openblas*) ;;
  *) echo "setup: libblas.so.3 -> $blas; selecting OpenBLAS"
     alt=$(update-alternatives --list libblas.so.3-x86_64-linux-gnu | grep openblas | head -1)
     update-alternatives --set libblas.so.3-x86_64-linux-gnu "$alt" ;;
esac

# The project venv: pinned PyPI packages (python/requirements.txt) for the tests and tools that
# run from it. Kept outside the clone, so a new clone or a second run reuses it.
venv="${CADRE_VENV:-$HOME/.cache/cadre/venv}"
requirements="$here/python/requirements.txt"
# The pins alone are compared (comments and blank lines are not): branches that only reword the
# comments must not remake the shared venv, which would also delete the torch of `--torch`.
pins() { grep -v -E '^[[:space:]]*(#|$)' "$1" 2>/dev/null || true; }
# A venv whose making was interrupted (no pyvenv.cfg: its python would be the base interpreter,
# and pip would install there) is made again too.
if [[ ! -f "$venv/.setup-requirements.txt" || ! -f "$venv/pyvenv.cfg" || ! -x "$venv/bin/python" ||
      "$(pins "$requirements")" != "$(pins "$venv/.setup-requirements.txt")" ]]; then
  python=$(bash "$here/scripts/find_python.sh")
  echo "setup: making the project venv $venv from $python ($("$python" --version 2>&1))"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$requirements" ||
    { echo "setup: pip could not install $requirements into $venv (is PyPI reachable?)" >&2; exit 1; }
  cp "$requirements" "$venv/.setup-requirements.txt"
fi
if ((with_torch)); then
  bash "$here/scripts/setup_torch.sh" "$venv"
fi
echo "setup: ok"
