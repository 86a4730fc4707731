#!/usr/bin/env bash
# `srun cadre run --nproc-per-node 2 -- PROGRAM` on a private two-node Slurm cluster
# (tests/support/slurm_cluster.sh; stopped at the end). Checks that node count, node rank, endpoint
# and run id come from SLURM_* alone: four workers with ranks 0..3 and WORLD_SIZE 4; and that a
# worker crash restarts the group under srun.
# Usage: srun_test.sh CADRE_BIN
set -euo pipefail
cadre=$1
source "$(dirname "$0")/../support/slurm_cluster.sh"
trap slurm_cluster_down EXIT
slurm_cluster_up
mkdir -p "$tmp/out"

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
