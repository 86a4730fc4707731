#!/usr/bin/env bash
# Issue #25's rows against PyTorch 2.x in one sitting, the peers as a careful PyTorch engineer runs
# them (issue #55: fused AdamW, jemalloc, FSDP2's mixed precision for bf16; docs/benchmarks.md):
# the training, memory and checkpoint rows (bench/vs_pytorch2.py), ResNet DDP against a
# channels-last torchvision + DDP (bench/resnet_throughput.py), KV-cache decoding against the faster
# of transformers' generate with a static cache and torch.compile and an eager KV-cache loop
# (bench/decode_throughput.py), the collectives against Gloo's same op (bench/collectives_vs_gloo.py)
# and the matmul peak at the model's GEMM shapes with the training rows' MFU against it
# (bench/gemm_peak.py), one after the other with the same venv, then the tables.
#
#   bench/vs_pytorch2_all.sh [BUILD [SECOND]]
#       BUILD: a libtorch 2.x build with CADRE_BENCH=ON (default build-torch2-cpu; decode needs its
#       bin/decode_bench). SECOND (e.g. build, what `make demo` makes): its Cadre side runs beside
#       BUILD's in every training row of the same sitting, against the same peer runs, and its
#       ResNet rows after BUILD's (bench/results/resnet_throughput-SECOND.md).
# The figures in docs/benchmarks.md come from a CPU build (CADRE_CUDA=OFF), which does not load
# the wheel's CUDA libraries (~230 MiB per process: docs/TORCH2.md):
#   cmake -S . -B build-torch2-cpu -G Ninja -DCMAKE_PREFIX_PATH=<torch.utils.cmake_prefix_path> \
#     -DCADRE_CUDA=OFF -DCADRE_BENCH=ON -DBUILD_TESTING=OFF
#   cmake --build build-torch2-cpu --target cadre decode_bench
# About 70 minutes on 2 cores with SECOND (2026-12-06 16:59-18:09; vs_pytorch2.py with both builds
# and 5 repeats 42 of them); run it on a quiet machine. Results in bench/results/, each table
# also as <table>-<UTC date-time of the start>.{md,json}.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-torch2-cpu}
second=${2:-}
[[ -z $second || -x $second/bin/cadre ]] || { echo "vs_pytorch2_all: no $second/bin/cadre: build it first" >&2; exit 2; }
python=${CADRE_VENV:-$HOME/.cache/cadre/venv}/bin/python
[[ -x $build/bin/cadre ]] || { echo "vs_pytorch2_all: no $build/bin/cadre: build it first" >&2; exit 2; }
[[ -x $build/bin/decode_bench ]] || {
  echo "vs_pytorch2_all: no $build/bin/decode_bench: configure $build with -DCADRE_BENCH=ON and build decode_bench" >&2
  exit 2
}
[[ -x $python ]] || { echo "vs_pytorch2_all: no venv python at $python: run scripts/setup.sh --torch" >&2; exit 2; }

stamp=$(date -u +%F-%H%M)
echo "== $(date -u +%FT%TZ) start; load average $(cut -d' ' -f1-3 /proc/loadavg)"
# Five alternating repeats for the training and ResNet rows: one repeat moves by 5-10% on a 2-core
# VM (FSDP2 1.48-1.62x, ResNet's Cadre side 1230-1407 images/s in the sittings of 2026-11-29),
# so three left the median to one draw.
"$python" "$root/bench/vs_pytorch2.py" --build "$build" ${second:+--build "$second"} --python "$python" --repeats 5
"$python" "$root/bench/resnet_throughput.py" --build "$build" --repeats 5
if [[ -n $second ]]; then
  # SECOND's run writes the same two files: both go to resnet_throughput-SECOND.*, BUILD's come back.
  for ext in md json; do
    cp "$root/bench/results/resnet_throughput.$ext" "$root/bench/results/resnet_throughput-first.$ext"
  done
  "$python" "$root/bench/resnet_throughput.py" --build "$second" --repeats 5
  for ext in md json; do
    mv "$root/bench/results/resnet_throughput.$ext" "$root/bench/results/resnet_throughput-$(basename "$second").$ext"
    mv "$root/bench/results/resnet_throughput-first.$ext" "$root/bench/results/resnet_throughput.$ext"
  done
fi
"$python" "$root/bench/decode_throughput.py" --build "$build" --threads 1,2 --rounds 3
"$python" "$root/bench/collectives_vs_gloo.py" --build "$build" --repeats 3
"$python" "$root/bench/gemm_peak.py" --build "$build" ${second:+--build "$second"} --sittings 1 \
  --rows "$root/bench/results/vs_pytorch2.json"
echo "== $(date -u +%FT%TZ) done; load average $(cut -d' ' -f1-3 /proc/loadavg)"
tables="vs_pytorch2 resnet_throughput${second:+ resnet_throughput-$(basename "$second")} decode_throughput collectives_vs_gloo gemm_peak"
# The sitting's own copy of every table (the undated ones are the next sitting's to overwrite).
for table in $tables; do
  for ext in md json; do
    if [[ -f $root/bench/results/$table.$ext ]]; then
      cp "$root/bench/results/$table.$ext" "$root/bench/results/$table-$stamp.$ext"
    fi
  done
  echo; echo "## bench/results/$table-$stamp.md"; cat "$root/bench/results/$table.md"
done
