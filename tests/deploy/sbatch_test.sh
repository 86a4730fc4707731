#!/usr/bin/env bash
# Scripts from `cadre deploy slurm` on a real two-node Slurm (tests/support/slurm_cluster.sh):
#  1. a 2-node job (tiny Llama, 1 worker per node) is submitted with sbatch and COMPLETES with the
#     per-step losses of the same 2 ranks run directly with `cadre run`;
#  2. a job whose node-2 agent is SIGKILLed mid-run is requeued by its script, resumes from its
#     checkpoint and COMPLETES with the same per-step losses as an uninterrupted run; before the
#     kill, each node's agent answers /metrics (--metrics-port 0: both fake nodes share a host)
#     with its own rank's training step;
#  3. a job whose workers fail on bad input (a data.dir that does not exist: exit 2) is FAILED
#     with exit code 2 and never requeued, though srun's own status is SIGTERM's 143 whenever
#     --kill-on-bad-exit ends the other node first: every agent's exit code reaches the script.
# Usage: sbatch_test.sh CADRE_BIN SOURCE_DIR
set -euo pipefail
cadre=$1
src=$2
source "$src/tests/support/slurm_cluster.sh"
source "$src/tests/deploy/sbatch_jobs.sh"
trap slurm_cluster_down EXIT
slurm_cluster_up
prepare_tiny_data

# 1. Submit, complete, expected losses.
reference_run "$tmp/ref-40" 40
script=$(deploy_job plain 40)
id=$(sbatch --parsable "$script") || fail "sbatch $script"
wait_for 120 job_finished "$id" || fail "job $id still $(job_field "$id" JobState) after 120 s"
[[ $(job_field "$id" JobState) == COMPLETED ]] || fail "job $id ended $(job_field "$id" JobState): $(cat "$tmp"/plain/logs/*)"
[[ $(steps_done "$tmp/runs/plain") == 40 ]] || fail "job $id stopped at step $(steps_done "$tmp/runs/plain")"
same_losses "$tmp/runs/plain" "$tmp/ref-40" ||
  fail "job $id losses differ from the reference: $(diff <(losses "$tmp/runs/plain") <(losses "$tmp/ref-40") | head)"
ls "$tmp"/plain/logs/plain-"$id"-node0.out "$tmp"/plain/logs/plain-"$id"-node1.out >/dev/null || fail "no per-node output"
echo "ok: job $id COMPLETED, 40 steps, final loss $(losses "$tmp/runs/plain" | tail -1 | cut -d' ' -f2) as the reference"

# 2. Kill node 2's agent after the step-20 checkpoint: the step fails, the script requeues the
#    job, the next attempt resumes from the checkpoint.
# Node 0's worker is stopped (SIGSTOP) once a checkpoint is committed, which holds rank 1 in its
# next collective: the job is still training, however fast this machine, while both agents
# answer /metrics and node 1's is killed; it goes on (SIGCONT) right after the kill. The tiny
# model runs 60-100 steps/s; between step 25 and the stop the checkpoint is committed and
# polled for (measured: stopped at steps 26 and 34).
steps=400
reference_run "$tmp/ref-$steps" "$steps"
script=$(deploy_job killed "$steps")
id=$(sbatch --parsable "$script") || fail "sbatch $script"
# The worker is found once training has begun (scanning /proc takes a moment), stopped later.
wait_for 120 past_step "$tmp/runs/killed" 1 || fail "job $id did not reach step 1: $(job_field "$id" JobState)"
agent0=$(agent_pid "$id" 0) || fail "no cadre run agent of job $id on node 0"
worker0=$(worker_pid "$agent0") || fail "node 0's agent of job $id has no worker: $(job_field "$id" JobState) at step $(steps_done "$tmp/runs/killed")"
wait_for 120 past_step "$tmp/runs/killed" 25 || fail "job $id did not reach step 25: $(job_field "$id" JobState)"
wait_for 60 committed_checkpoint "$tmp/runs/killed" || fail "job $id committed no checkpoint by step $(steps_done "$tmp/runs/killed")"
kill -STOP "$worker0"
held_at=$(steps_done "$tmp/runs/killed")
((held_at < steps)) || fail "job $id reached its last step ($held_at) before node 0's worker was stopped"
metrics_ranks() {  # metrics_ranks NODE: the ranks whose cadre_train_step NODE's agent serves
  local url
  url=$(grep -ohP 'metrics: serving \Khttp://\S+' "$tmp/killed/logs/killed-$id-node$1.out" | tail -1) || return 1
  curl -fsS --max-time 2 "$url" | grep -oP '^cadre_train_step\{(?:[^}]*,)?rank="\K[0-9]+'  # rank=, not local_rank=
}
# Which node hosts which rank is the rendezvous's choice (the first agent to arrive is group rank
# 0): each node's agent must serve a rank's step, and the two together both ranks.
served=""
for node in 0 1; do
  wait_for 30 metrics_ranks "$node" || fail "node $node's agent of job $id did not answer /metrics with a rank's step: $(tail -5 "$tmp/killed/logs/killed-$id-node$node.out")"
  ranks=$(metrics_ranks "$node" | tr '\n' ' ')
  echo "ok: node $node's /metrics answers with the step of rank(s) $ranks"
  served="$served $ranks"
done
[[ $(tr ' ' '\n' <<<"$served" | grep -v '^$' | sort -u | tr '\n' ' ') == "0 1 " ]] || fail "the agents' /metrics served ranks$served, not 0 and 1"
pid=$(agent_pid "$id" 1) || fail "no cadre run agent of job $id on node 1"
killed_at=$(steps_done "$tmp/runs/killed")
kill -9 "$pid"
kill -CONT "$worker0"
echo "killed node 1's agent (pid $pid) of job $id at step $killed_at (node 0's worker stopped at step $held_at until then)"
wait_for 240 job_finished "$id" || fail "job $id still $(job_field "$id" JobState) after 240 s"
state=$(job_field "$id" JobState)
[[ $state == COMPLETED ]] || fail "job $id ended $state: $(tail -20 "$tmp"/killed/logs/killed-"$id".out)"
restarts=$(job_field "$id" Restarts)
# The job's own output (each attempt's agents) goes beside the cluster's logs that fail() shows.
cp "$tmp"/killed/logs/killed-"$id"*.out "$tmp"/log/ 2>/dev/null || true
((restarts >= 1)) || fail "job $id was not requeued (Restarts=$restarts)"
# Whatever checkpoint was the newest when the agent died (step 50, 100, ... depending on how far
# the job got; a step or two may run between reading killed_at and the kill): not a fresh start,
# not the end.
resumed=$(grep -oP 'resumed from \S+ at step \K[0-9]+' "$tmp"/killed/logs/job-"$id"/attempt-1/round_0/rank_0/stderr.log) ||
  fail "attempt 1 did not resume from a checkpoint: $(tail -5 "$tmp"/killed/logs/job-"$id"/attempt-1/round_0/rank_0/stderr.log)"
((resumed > 0 && resumed < steps)) || fail "attempt 1 resumed at step $resumed, not from a checkpoint of attempt 0 (killed at step $killed_at)"
[[ $(steps_done "$tmp/runs/killed") == "$steps" ]] || fail "job $id stopped at step $(steps_done "$tmp/runs/killed")"
same_losses "$tmp/runs/killed" "$tmp/ref-$steps" ||
  fail "resumed job's losses differ: $(diff <(losses "$tmp/runs/killed") <(losses "$tmp/ref-$steps") | head)"
echo "ok: job $id requeued $restarts time(s), resumed at step $resumed (killed at $killed_at), $steps steps equal to the uninterrupted run"
# 3. Bad input on every node: each agent gives up with the workers' exit 2, and the script reads
#    the agents' exit-code files rather than srun's status.
script=$(deploy_job badinput 40 --set "data.dir=$tmp/no-such-data")
id=$(sbatch --parsable "$script") || fail "sbatch $script"
wait_for 120 job_finished "$id" || fail "job $id still $(job_field "$id" JobState) after 120 s"
out="$tmp/badinput/logs/badinput-$id.out"
[[ $(job_field "$id" JobState) == FAILED ]] || fail "job $id ended $(job_field "$id" JobState), not FAILED: $(tail -5 "$out")"
[[ $(job_field "$id" ExitCode) == 2:0 ]] || fail "job $id exit code $(job_field "$id" ExitCode), not 2:0: $(tail -5 "$out")"
[[ $(job_field "$id" Restarts) == 0 ]] || fail "job $id was requeued $(job_field "$id" Restarts) time(s) after bad input"
grep -q "bad input (exit 2, see the node logs): not requeueing" "$out" || fail "no bad-input line in $out: $(tail -5 "$out")"
grep -qx 2 "$tmp"/badinput/logs/job-"$id"/attempt-0/exit-codes/node* || fail "no agent wrote exit code 2: $(tail -5 "$out")"
grep -q "no-such-data" "$tmp"/badinput/logs/badinput-"$id"-node0.out || fail "node 0's log does not name the missing data.dir"
echo "ok: job $id failed on bad input with exit 2, not requeued (agents' codes: $(cat "$tmp"/badinput/logs/job-"$id"/attempt-0/exit-codes/node* | tr '\n' ' '); srun: $(grep -oP 'step ended with \K[0-9]+|srun: error: .*' "$out" | head -2 | tr '\n' ' '))"
echo "PASS: sbatch scripts from cadre deploy slurm on a 2-node Slurm cluster"
