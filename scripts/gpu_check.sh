#!/usr/bin/env bash
# `make gpu-check`: the one command that checks Cadre on a GPU (issue #24). On a machine with a
# GPU it builds Cadre with CUDA, runs the `cuda`-labelled tests, trains the small Llama and the
# 0.9B Llama for a fixed number of steps, runs the PyTorch peer (eager and torch.compile) on the
# same shapes in the same run, checks loss parity CPU vs GPU over 20 steps and the checkpoint
# round trip CPU -> GPU -> CPU, trains FULL_SHARD under the launcher (`cadre run`, one rank per
# visible GPU: the NCCL path) and resumes its checkpoint on the CPU at another world size and
# strategy (and a CPU checkpoint of that shape on the GPU's ranks), counts host synchronisations
# per step (CUDA's sync-debug mode) and prints a markdown table. It needs no registry: scripts/gpu_bundle.sh prepared `.dev/` on a
# machine that has one, and the GPU machine's own PyTorch supplies libtorch.
#
#   scripts/gpu_check.sh                          # the GPU check (exits 1 when there is no GPU)
#   scripts/gpu_check.sh --device cpu --tiny --build build --python PY   # the CPU rehearsal CI runs
#
# Options: --device cuda|cpu (default cuda), --tiny (two tiny shapes, few steps), --build DIR (an
# existing build: only `cmake --build` it; default: configure and build in /tmp/cadre-gpu-build),
# --out DIR (runs, logs and the table; default gpu-check/), --python PY (default python3).
# Exit status: 0 when every part passed, 1 when one failed (the table says which), 2 on bad usage.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
device=cuda tiny=0 build="" out="$root/gpu-check" python=python3
while (($#)); do
  case "$1" in
    --device) device=${2:-}; shift 2 ;;
    --tiny) tiny=1; shift ;;
    --build) build=${2:-}; shift 2 ;;
    --out) out=${2:-}; shift 2 ;;
    --python) python=${2:-}; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $device == cuda || $device == cpu ]] || { echo "gpu-check: --device '$device' is not cuda or cpu" >&2; exit 2; }
command -v "$python" >/dev/null || { echo "gpu-check: no python at '$python' (--python)" >&2; exit 2; }
t_start=$(date +%s)
step() { echo "== gpu-check [$(( $(date +%s) - t_start ))s] $*"; }
failed=()

# --- 1. the device ---------------------------------------------------------------------------
if [[ $device == cuda ]]; then
  if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu-check: no GPU here (torch.cuda.is_available() is false in $python; nvidia-smi: $(command -v nvidia-smi || echo absent))." >&2
    echo "gpu-check: GPU figures need a machine with one; the CPU rehearsal is: scripts/gpu_check.sh --device cpu --tiny" >&2
    exit 1
  fi
fi
rm -rf "$out"; mkdir -p "$out/logs"
logs="$out/logs"

# --- 2. the build ----------------------------------------------------------------------------
if [[ -n $build ]]; then
  # Every binary the check runs: cadre, and on a GPU test_cuda, which holds the cuda-labelled
  # tests (tests/shard/CMakeLists.txt); its tests are discovered when it is built, so a stale
  # or missing one would otherwise run old code or nothing.
  targets=(cadre)
  [[ $device == cuda ]] && targets+=(test_cuda)
  step "build: cmake --build $build --target ${targets[*]}"
  cmake --build "$build" --target "${targets[@]}" >"$logs/build.log" 2>&1 || { tail -20 "$logs/build.log"; exit 1; }
else
  build=/tmp/cadre-gpu-build
  step "build: scripts/gpu_build.sh $build (CADRE_CUDA=$([[ $device == cuda ]] && echo ON || echo OFF), python $python)"
  cuda_flag=$([[ $device == cuda ]] && echo ON || echo OFF)
  # The same python (so the same torch) as the GPU probe above and the PyTorch peer below.
  PYTHON=$python bash "$root/scripts/gpu_build.sh" "$build" -DCADRE_CUDA=$cuda_flag >"$logs/build.log" 2>&1 \
    || { tail -30 "$logs/build.log"; exit 1; }
fi
cadre="$build/bin/cadre"
# Libraries unpacked from .dev/ by scripts/gpu_build.sh (a machine without Debian's packages).
[[ -d $root/.dev/root/usr/lib/x86_64-linux-gnu ]] &&
  export LD_LIBRARY_PATH=$root/.dev/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
[[ -x $cadre ]] || { echo "gpu-check: no $cadre after the build" >&2; exit 1; }

# --- 3. the cuda-labelled tests ----------------------------------------------------------------
if [[ $device == cuda ]]; then
  step "ctest -L cuda"
  (cd "$build" && ctest -L '^cuda$' --no-tests=error --output-on-failure --timeout 300) >"$logs/ctest_cuda.log" 2>&1 \
    && echo "cuda tests: passed" >"$out/cuda_tests.txt" \
    || { echo "cuda tests: FAILED ($logs/ctest_cuda.log)" >"$out/cuda_tests.txt"; failed+=(cuda-tests); }
  grep -E "tests passed|tests failed" "$logs/ctest_cuda.log" | tail -1 >>"$out/cuda_tests.txt"
else
  echo "cuda tests: not run (device cpu: the cuda-labelled tests need a GPU)" >"$out/cuda_tests.txt"
fi

# --- 4. data ---------------------------------------------------------------------------------
step "data"
if ((tiny)); then
  inputs=$(ls "$root"/third_party/data/sotu/data/*.txt | head -12)
  # shellcheck disable=SC2086
  "$cadre" data prepare --input $inputs --out "$out/data/short" --vocab-size 512 --seq-len 64 --threads 2 \
    >"$logs/data.log" 2>&1 || { tail -20 "$logs/data.log"; exit 1; }
  # One tiny shape; torch.compile with dynamo's eager backend (inductor's C++ code generation
  # takes minutes on 2 cores): every step of the script runs, in about a minute.
  models=(tiny_a); data_of=(short); parity_model=tiny_a; parity_batch=4; parity_threads=2; backend=eager
else
  "$cadre" data prepare --input "$root/third_party/data/sotu/data" --out "$out/data/short" --vocab-size 8192 \
    --seq-len 256 --threads 8 >"$logs/data.log" 2>&1 || { tail -20 "$logs/data.log"; exit 1; }
  "$cadre" data prepare --input "$root/third_party/data/sotu/data" --out "$out/data/long" \
    --tokenizer "$out/data/short/tokenizer.model" --seq-len 2048 --threads 8 >>"$logs/data.log" 2>&1 \
    || { tail -20 "$logs/data.log"; exit 1; }
  models=(small llama_0.9b); data_of=(short long); parity_model=small; parity_batch=4; parity_threads=8
  backend=inductor
fi

train() {  # train NAME CONFIG DATA DEVICE [--set ...]: one cadre run under $out/runs/NAME
  local name=$1 config=$2 data=$3 dev=$4; shift 4
  "$cadre" train --config "$root/configs/gpu/$config.yaml" --set "data.dir=$out/data/$data" \
    --set "run.dir=$out/runs/$name" --set "train.device=$dev" "$@" >"$logs/$name.log" 2>&1
}

# --- 5. throughput: Cadre and the PyTorch peer on the same shapes ----------------------------
for i in "${!models[@]}"; do
  m=${models[$i]} d=${data_of[$i]}
  step "train $m on $device"
  train "$m" "$m" "$d" "$device" || { failed+=("train-$m"); tail -5 "$logs/$m.log"; continue; }
  peer_model=$("$python" "$root/scripts/gpu_check_report.py" peer-model "$out/runs/$m/config.yaml")
  batch=$(sed -n "s/^  batch_size: //p" "$root/configs/gpu/$m.yaml")
  steps=$(sed -n 's/^  steps: //p' "$root/configs/gpu/$m.yaml")
  threads=$(sed -n 's/^  threads: //p' "$root/configs/gpu/$m.yaml")
  step "pytorch eager and compiled ($backend) $m on $device"
  "$python" "$root/bench/gpu_peer.py" train --device "$device" --data "$out/data/$d" --model "$peer_model" \
    --batch "$batch" --steps "$steps" --threads "$threads" --compile-backend "$backend" \
    --out-prefix "$out/runs/$m" >/dev/null 2>"$logs/$m.peer.log" || { failed+=("pytorch-$m"); tail -5 "$logs/$m.peer.log"; }
done
step "bf16 matmul peak on $device"
"$python" "$root/bench/gpu_peer.py" matmul --device "$device" --size $( ((tiny)) && echo 512 || echo 8192) \
  --threads $( ((tiny)) && echo 2 || echo 0) >"$out/matmul.json" 2>"$logs/matmul.log" || failed+=(matmul)

# --- 6. parity CPU vs device over 20 steps, and the checkpoint round trip --------------------
# float32 compute: what is compared is the device's arithmetic, not bf16 rounding.
parity=(--set parallel.mixed_precision.param_dtype=float32 --set data.batch_size=$parity_batch
        --set train.steps=20 --set train.threads=$parity_threads --set optim.warmup_steps=5)
d=${data_of[0]}
step "parity: $parity_model 20 steps on cpu and on $device"
# Both write a checkpoint at step 10 too: the round trip resumes each on the other device.
parity+=(--set checkpoint.interval=10)
train parity_cpu "$parity_model" "$d" cpu "${parity[@]}" || failed+=(parity-cpu-run)
train parity_dev "$parity_model" "$d" "$device" "${parity[@]}" || failed+=(parity-device-run)
step "round trip: $device -> cpu and cpu -> $device at step 10"
train trip_to_cpu "$parity_model" "$d" cpu "${parity[@]}" \
  --set "checkpoint.resume=$out/runs/parity_dev/checkpoints/step-00000010" || failed+=(trip-to-cpu-run)
train trip_to_dev "$parity_model" "$d" "$device" "${parity[@]}" \
  --set "checkpoint.resume=$out/runs/parity_cpu/checkpoints/step-00000010" || failed+=(trip-to-device-run)

# --- 7. FULL_SHARD under the launcher; the round trip across device, world size and strategy --
# One rank per visible GPU (the NCCL path; with one GPU world size 1 makes no communicator, so no
# collective runs: the table says so), two Gloo ranks in the rehearsal. The other side of the
# round trip is the CPU at another world size and strategy, with the same global batch, so the
# same samples in the same order: 1 rank NO_SHARD, or 2 ranks SHARD_GRAD_OP against one GPU.
if [[ $device == cuda ]]; then
  nproc=$("$python" -c 'import torch; print(max(1, torch.cuda.device_count()))')
else
  nproc=2
fi
if ((nproc == 1)); then other_world=2 other_strategy=SHARD_GRAD_OP; else other_world=1 other_strategy=NO_SHARD; fi
# other_world is 2 only when nproc is 1, where the global batch is parity_batch (even).
per_rank=$(( parity_batch / nproc > 0 ? parity_batch / nproc : 1 ))
global=$(( per_rank * nproc ))
threads_of() { echo $(( parity_threads / $1 > 0 ? parity_threads / $1 : 1 )); }
fsdp=(--set parallel.mixed_precision.param_dtype=float32 --set train.steps=20 --set optim.warmup_steps=5
      --set checkpoint.interval=10 --set parallel.strategy=FULL_SHARD --set data.batch_size=$per_rank
      --set train.threads="$(threads_of "$nproc")")
other=(--set parallel.mixed_precision.param_dtype=float32 --set train.steps=20 --set optim.warmup_steps=5
       --set checkpoint.interval=10 --set parallel.strategy=$other_strategy
       --set data.batch_size=$(( global / other_world )) --set train.threads="$(threads_of "$other_world")")
launch() {  # launch NAME NPROC DEVICE [--set ...]: `cadre run` of NPROC workers under $out/runs/NAME
  local name=$1 n=$2 dev=$3; shift 3
  "$cadre" run --nproc-per-node "$n" --log-dir "$logs/$name.ranks" -- "$cadre" train \
    --config "$root/configs/gpu/$parity_model.yaml" --set "data.dir=$out/data/$d" --set "run.dir=$out/runs/$name" \
    --set "train.device=$dev" "$@" >"$logs/$name.log" 2>&1
}
step "cadre run: $parity_model FULL_SHARD x $nproc on $device; $other_strategy x $other_world on cpu (global batch $global)"
launch fsdp_dev "$nproc" "$device" "${fsdp[@]}" || { failed+=(launcher-run); tail -5 "$logs/fsdp_dev.log"; }
launch fsdp_cpu "$other_world" cpu "${other[@]}" || { failed+=(launcher-cpu-run); tail -5 "$logs/fsdp_cpu.log"; }
step "round trip at step 10: FULL_SHARD x $nproc $device <-> $other_strategy x $other_world cpu"
launch fsdp_trip_to_cpu "$other_world" cpu "${other[@]}" \
  --set "checkpoint.resume=$out/runs/fsdp_dev/checkpoints/step-00000010" || failed+=(launcher-trip-to-cpu-run)
launch fsdp_trip_to_dev "$nproc" "$device" "${fsdp[@]}" \
  --set "checkpoint.resume=$out/runs/fsdp_cpu/checkpoints/step-00000010" || failed+=(launcher-trip-to-device-run)

# --- 8. the table ----------------------------------------------------------------------------
step "table"
"$python" "$root/scripts/gpu_check_report.py" table --out "$out" --device "$device" --models "${models[*]}" \
  --tiny "$tiny" >"$out/gpu_check.md" || failed+=(parity-or-round-trip)
cat "$out/cuda_tests.txt"
cat "$out/gpu_check.md"
step "done in $(( $(date +%s) - t_start )) s"
if ((${#failed[@]})); then
  echo "gpu-check: FAILED: ${failed[*]} (logs in $logs)" >&2
  exit 1
fi
echo "gpu-check: passed ($out/gpu_check.md)"
