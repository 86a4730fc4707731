#!/usr/bin/env bash
# Retry soak: N jobs (default 20) written by `cadre deploy slurm` on the test Slurm cluster, each
# hit by one random failure, and how many still finish with the losses of an uninterrupted run.
#   worker  a worker process is SIGKILLed: `cadre run` restarts the group, which resumes
#   node    a node's `cadre run` agent is SIGKILLed: the step dies, the script requeues the job
#   time    the job runs under a 1-minute limit, signalled 40 s before it: it checkpoints and requeues
# Prints one line per job and "soak: K of N jobs finished with correct losses"; exits 1 unless
# K == N. Cost here: ~10-11 minutes on 2 cores (a time-limit job needs 2-8 attempts: Slurm checks
# limits every 30 s, and a requeued job waits cred_expire, 10 s, before it starts again).
# Usage: sbatch_soak.sh CADRE_BIN SOURCE_DIR [JOBS] [SEED]
set -euo pipefail
cadre=$1
src=$2
jobs=${3:-20}
seed=${4:-$(date +%s)}
source "$src/tests/support/slurm_cluster.sh"
source "$src/tests/deploy/sbatch_jobs.sh"
trap slurm_cluster_down EXIT
slurm_cluster_up
prepare_tiny_data
RANDOM=$seed
echo "soak: $jobs jobs, seed $seed"

short=300  # steps of worker/node jobs (~8 s of training)
long=2000  # steps of time-limit jobs (~45 s: longer than one attempt under the limit)
reference_run "$tmp/ref-$short" "$short"
reference_run "$tmp/ref-$long" "$long"

kinds=(worker node time)
declare -a ids names kind at target
for ((i = 0; i < jobs; ++i)); do
  names[i]=soak-$i
  kind[i]=${kinds[RANDOM % 3]}
  target[i]=$((25 + RANDOM % 125))  # worker and node jobs: the failure comes after this step
  if [[ ${kind[i]} == time ]]; then
    script=$(deploy_job "${names[i]}" "$long" --time 1 --signal-before 40 --max-requeues 20)
  else
    script=$(deploy_job "${names[i]}" "$short" --max-requeues 3)
  fi
  # Held until all are queued: none may finish before the injector looks at it.
  ids[i]=$(sbatch --parsable --hold "$script") || fail "sbatch $script"
done
scontrol release "$(IFS=,; echo "${ids[*]}")"

worker_pids() {  # worker_pids JOB_ID: the job's `cadre train` processes
  local d argv
  for d in /proc/[0-9]*; do
    grep -qzx "SLURM_JOB_ID=$1" "$d/environ" 2>/dev/null || continue
    { mapfile -d '' argv <"$d/cmdline"; } 2>/dev/null || continue
    # A zombie (a worker that has finished) takes SIGKILL without failing anything.
    [[ ${argv[1]:-} == train ]] && ! gone "${d#/proc/}" && echo "${d#/proc/}"
  done
  return 0
}

inject() {  # inject I: the job's failure, now; records the step it was at
  local i=$1 id=${ids[$1]} pid pids
  at[i]=$(steps_done "$tmp/runs/${names[i]}")
  case ${kind[i]} in
    worker)
      mapfile -t pids < <(worker_pids "$id")
      ((${#pids[@]})) || { at[i]="no worker found"; return; }
      kill -9 "${pids[RANDOM % ${#pids[@]}]}" 2>/dev/null || at[i]="worker gone" ;;
    node)
      pid=$(agent_pid "$id" $((RANDOM % 2))) || { at[i]="no agent found"; return; }
      kill -9 "$pid" 2>/dev/null || at[i]="agent gone" ;;
  esac
}

# Watch every running job at 10 Hz and hit each worker/node job once it passes its target step.
pending=()
for ((i = 0; i < jobs; ++i)); do if [[ ${kind[i]} == time ]]; then at[i]=-; else pending+=("$i"); fi; done
deadline=$((SECONDS + 1800))
while ((${#pending[@]})) && ((SECONDS < deadline)); do
  next=()
  for i in "${pending[@]}"; do
    if past_step "$tmp/runs/${names[i]}" "${target[i]}"; then inject "$i"
    elif job_finished "${ids[i]}"; then at[i]="finished before step ${target[i]}"
    else next+=("$i"); fi
  done
  pending=("${next[@]}")
  sleep 0.1
done
for i in "${pending[@]}"; do at[i]="never reached ${target[i]}"; done

ok=0
printf '%-8s %-6s %-7s %-12s %-9s %s\n' job kind at requeues state result
for ((i = 0; i < jobs; ++i)); do
  id=${ids[i]} run=$tmp/runs/${names[i]}
  wait_for 1800 job_finished "$id" || true
  state=$(job_field "$id" JobState)
  steps=$short; [[ ${kind[i]} == time ]] && steps=$long
  log="$tmp/${names[i]}/logs/${names[i]}-$id.out"
  result=wrong
  if [[ $state == COMPLETED && $(steps_done "$run") == "$steps" ]] && same_losses "$run" "$tmp/ref-$steps"; then result=correct; fi
  # Did the failure happen? (A time limit can only be seen in the job's output.)
  hit=yes
  case ${kind[i]} in
    worker) ls -d "$tmp/${names[i]}"/logs/job-"$id"/attempt-*/round_1 >/dev/null 2>&1 || hit=no ;;
    node) (($(job_field "$id" Restarts) >= 1)) || hit=no ;;
    time) grep -q "time limit near" "$log" 2>/dev/null || hit=no ;;
  esac
  [[ $result == correct && $hit == yes ]] && ok=$((ok + 1))
  printf '%-8s %-6s %-7s %-12s %-9s %s%s\n' "$id" "${kind[i]}" "${at[i]}" "$(job_field "$id" Restarts)" "$state" \
    "$result" "$([[ $hit == no ]] && echo " (the failure did not happen)")"
done
echo "soak: $ok of $jobs jobs finished with correct losses after their failure (seed $seed, ${SECONDS}s)"
((ok == jobs))
