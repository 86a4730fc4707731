#!/usr/bin/env bash
# Issue #25's rows against PyTorch 2.x in one sitting: the training, memory and checkpoint rows
# (bench/vs_pytorch2.py), ResNet DDP against torchvision + DDP (bench/resnet_throughput.py) and
# KV-cache decoding against transformers' generate (bench/decode_throughput.py) and the collectives
# against Gloo's own all-reduce (bench/collectives_vs_gloo.py), one after the other with the same
# Cadre build and the same venv, then the four tables.
#
#   bench/vs_pytorch2_all.sh [BUILD]     BUILD: a libtorch 2.x build with CADRE_BENCH=ON
#                                        (default build-torch2-cpu; decode needs its bin/decode_bench)
# The figures in docs/benchmarks.md come from a CPU build (CADRE_CUDA=OFF), which does not load
# the wheel's CUDA libraries (~230 MiB per process: docs/TORCH2.md):
#   cmake -S . -B build-torch2-cpu -G Ninja -DCMAKE_PREFIX_PATH=<torch.utils.cmake_prefix_path> \
#     -DCADRE_CUDA=OFF -DCADRE_BENCH=ON -DBUILD_TESTING=OFF
#   cmake --build build-torch2-cpu --target cadre decode_bench
# ~23 minutes on 2 cores; run it on a quiet machine. Results in bench/results/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-torch2-cpu}
python=${CADRE_VENV:-$HOME/.cache/cadre/venv}/bin/python
[[ -x $build/bin/cadre ]] || { echo "vs_pytorch2_all: no $build/bin/cadre: build it first" >&2; exit 2; }
[[ -x $build/bin/decode_bench ]] || {
  echo "vs_pytorch2_all: no $build/bin/decode_bench: configure $build with -DCADRE_BENCH=ON and build decode_bench" >&2
  exit 2
}
[[ -x $python ]] || { echo "vs_pytorch2_all: no venv python at $python: run scripts/setup.sh --torch" >&2; exit 2; }

echo "== $(date -u +%FT%TZ) start; load average $(cut -d' ' -f1-3 /proc/loadavg)"
# Five alternating repeats for the training and ResNet rows: one repeat moves by 5-10% on a 2-core
# VM (FSDP2 1.48-1.62x, ResNet's Cadre side 1230-1407 images/s in the sittings of 2026-11-29),
# so three left the median to one draw.
"$python" "$root/bench/vs_pytorch2.py" --build "$build" --python "$python" --repeats 5
"$python" "$root/bench/resnet_throughput.py" --build "$build" --repeats 5
"$python" "$root/bench/decode_throughput.py" --build "$build" --threads 1,2 --rounds 3
"$python" "$root/bench/collectives_vs_gloo.py" --build "$build" --repeats 3
echo "== $(date -u +%FT%TZ) done; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for table in vs_pytorch2 resnet_throughput decode_throughput collectives_vs_gloo; do
  echo; echo "## bench/results/$table.md"; cat "$root/bench/results/$table.md"
done
