#!/usr/bin/env bash
# `srun cadre run --nproc-per-node 2 -- PROGRAM` on a private two-node Slurm cluster (nodes n1 and
# n2 on 127.0.0.1; its own munged socket, config, ports and state in a temp dir; all stopped at
# the end). Checks that node count, node rank, endpoint and run id come from SLURM_* alone: four
# workers with ranks 0..3 and WORLD_SIZE 4; and that a worker crash restarts the group under srun.
# Usage: srun_test.sh CADRE_BIN
set -euo pipefail
cadre=$1
tmp=$(mktemp -d /tmp/cadre-srun-test-XXXXXX)
wait_for() {  # wait_for SECONDS COMMAND...: polls until the command succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do ((SECONDS < deadline)) || return 1; sleep 0.1; done
}
munged_pid=""
slurm_pids=()
gone() { [[ ! -e /proc/$1 ]] || [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == Z ]]; }
cleanup() {
  # Let finished steps report to the controller, then shut Slurm down; munge goes last (slurmd
  # and slurmstepd need it to say goodbye). Anything left is killed: daemons by pid, step daemons
  # (re-parented away from us) by the temp dir in their environment.
  if [[ -n ${SLURM_CONF:-} ]]; then
    wait_for 20 test -z "$(squeue -h 2>/dev/null)" || true
    scontrol shutdown >/dev/null 2>&1 || true
  fi
  for p in "${slurm_pids[@]}"; do wait_for 20 gone "$p" || kill -9 "$p" 2>/dev/null || true; done
  for e in /proc/[0-9]*/environ; do
    if grep -qs "$tmp" "$e"; then p=${e#/proc/}; p=${p%/environ}; [[ $p != "$$" ]] && kill -9 "$p" 2>/dev/null || true; fi
  done
  if [[ -n $munged_pid ]]; then kill "$munged_pid" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/log/*; do echo "== $f"; tail -20 "$f"; done; exit 1; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mkdir -p "$tmp/log" "$tmp/state" "$tmp/spool/n1" "$tmp/spool/n2" "$tmp/out"
/usr/sbin/munged --foreground --force --socket="$tmp/munge.sock" --key-file=/etc/munge/munge.key \
  --pid-file="$tmp/munged.pid" --seed-file="$tmp/munge.seed" --log-file="$tmp/log/munged.log" &
munged_pid=$!
wait_for 10 test -S "$tmp/munge.sock" || fail "munged did not start"

cat > "$tmp/slurm.conf" <<CONF
ClusterName=cadretest
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge.sock
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool/%n
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd-%n.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd-%n.log
JobCompType=jobcomp/none
NodeName=n1 NodeAddr=127.0.0.1 Port=$(free_port) CPUs=2 State=UNKNOWN
NodeName=n2 NodeAddr=127.0.0.1 Port=$(free_port) CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$tmp/slurm.conf  # also marks the step daemons' environment for cleanup
/usr/sbin/slurmctld -D -i -f "$SLURM_CONF" >"$tmp/log/slurmctld.out" 2>&1 &
slurm_pids+=($!)
for n in n1 n2; do
  /usr/sbin/slurmd -D -N "$n" -f "$SLURM_CONF" >"$tmp/log/slurmd-$n.out" 2>&1 &
  slurm_pids+=($!)
done
idle_nodes() { [[ $(sinfo -h -N -t idle -o %N | sort -u | wc -l) == 2 ]]; }
wait_for 60 idle_nodes || fail "slurm nodes did not come up"

cat > "$tmp/worker.sh" <<'WORKER'
#!/bin/sh
out=$1; mode=$2
echo "$RANK $LOCAL_RANK $WORLD_SIZE $GROUP_RANK $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_RUN_ID" > "$out/$mode.$TORCHELASTIC_RESTART_COUNT.$RANK"
if [ "$mode" = crash ] && [ "$RANK" = 2 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 5; fi
exit 0
WORKER

# The agents of one job share its secret; srun passes the environment to every node.
CADRE_JOB_SECRET=$(openssl rand -hex 32)
export CADRE_JOB_SECRET

# 1. No flag but --nproc-per-node: everything else comes from Slurm.
timeout 120 srun -N2 --ntasks-per-node=1 "$cadre" run --nproc-per-node 2 -- /bin/sh "$tmp/worker.sh" "$tmp/out" ok \
  >"$tmp/log/srun-ok.out" 2>&1 || fail "srun cadre run exited $?: $(cat "$tmp/log/srun-ok.out")"
for r in 0 1 2 3; do
  [[ -f $tmp/out/ok.0.$r ]] || fail "rank $r did not run: $(cat "$tmp/log/srun-ok.out")"
  read -r rank local world group restarts run_id <"$tmp/out/ok.0.$r"
  [[ $rank == "$r" && $local == $((r % 2)) && $world == 4 && $group == $((r / 2)) && $restarts == 0 ]] ||
    fail "rank $r saw RANK=$rank LOCAL_RANK=$local WORLD_SIZE=$world GROUP_RANK=$group"
  [[ $run_id == slurm-* ]] || fail "run id '$run_id' does not come from SLURM_JOB_ID"
done
grep -q "\[rank 3\]" "$tmp/log/srun-ok.out" && fail "the ok worker prints nothing, yet a [rank 3] line appeared"

# 2. A worker crash under srun restarts the whole group once.
timeout 120 srun -N2 --ntasks-per-node=1 "$cadre" run --nproc-per-node 2 --max-restarts 1 -- \
  /bin/sh "$tmp/worker.sh" "$tmp/out" crash >"$tmp/log/srun-crash.out" 2>&1 ||
  fail "srun cadre run (crash once) exited $?: $(cat "$tmp/log/srun-crash.out")"
for r in 0 1 2 3; do
  [[ -f $tmp/out/crash.1.$r ]] || fail "rank $r did not restart: $(cat "$tmp/log/srun-crash.out")"
done
grep -q "rank 2 failed with exit code 5" "$tmp/log/srun-crash.out" || fail "no failure report in the output"
echo "PASS: srun cadre run on a 2-node Slurm cluster"
