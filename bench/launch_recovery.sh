#!/usr/bin/env bash
# Launcher benchmark, printing two times (median of REPS runs, default 5):
#   launch -> first worker running, and launch -> all workers running
#       (single node: 1 agent x 2 workers; and 2 agents x 2 workers on loopback)
#   worker crash -> every worker of the new round running
#       (2 agents x 2 workers; rank 3 exits 1 one second after starting; --max-restarts 1)
# Default flags (monitor interval 0.1 s, stop timeout 10 s: the workers are shells that die on
# SIGTERM at once). Worker timestamps come from `date +%s.%N` in the worker itself.
# Usage: bench/launch_recovery.sh [build-dir]
set -euo pipefail
build=${1:-build}
cadre=$(cd "$build" && pwd)/bin/cadre
reps=${REPS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/worker.sh" <<'WORKER'
#!/bin/sh
dir=$1
date +%s.%N > "$dir/start.$TORCHELASTIC_RESTART_COUNT.$RANK"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$WORLD_SIZE" = 4 ]; then
  if [ "$RANK" = 3 ]; then sleep 1; date +%s.%N > "$dir/crash"; exit 1; fi
  while :; do sleep 0.05; done
fi
WORKER

now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f\n", a - b }'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
minmax() { cat "$@" | sort -g | sed -n '1p;$p' | tr '\n' ' '; }

single_first=(); single_all=(); multi_first=(); multi_all=(); recovery=()
for ((i = 0; i < reps; i++)); do
  d="$tmp/single$i"; mkdir -p "$d"
  t0=$(now)
  "$cadre" run --nproc-per-node 2 --log-dir "$d/logs" -- /bin/sh "$tmp/worker.sh" "$d" >/dev/null 2>&1
  read -r first last <<<"$(minmax "$d"/start.0.*)"
  single_first+=("$(sub "$first" "$t0")"); single_all+=("$(sub "$last" "$t0")")

  d="$tmp/multi$i"; mkdir -p "$d"
  port=$((20000 + RANDOM % 20000))
  openssl rand -hex 32 >"$d/secret" && chmod 600 "$d/secret"  # two nodes share the job secret
  args=(--nnodes 2 --nproc-per-node 2 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id bench$i --max-restarts 1
        --job-secret-file "$d/secret")
  t0=$(now)
  "$cadre" run "${args[@]}" --node-rank 0 --log-dir "$d/logs0" -- /bin/sh "$tmp/worker.sh" "$d" >/dev/null 2>&1 &
  a0=$!
  "$cadre" run "${args[@]}" --node-rank 1 --log-dir "$d/logs1" -- /bin/sh "$tmp/worker.sh" "$d" >/dev/null 2>&1
  wait $a0
  read -r first last <<<"$(minmax "$d"/start.0.*)"
  multi_first+=("$(sub "$first" "$t0")"); multi_all+=("$(sub "$last" "$t0")")
  read -r _ last <<<"$(minmax "$d"/start.1.*)"
  recovery+=("$(sub "$last" "$(cat "$d/crash")")")
done

printf 'cadre run launcher benchmark (%d runs each, median seconds)\n' "$reps"
printf '  launch -> first worker running, 1 node x 2 workers:   %.3f\n' "$(printf '%s\n' "${single_first[@]}" | median)"
printf '  launch -> all workers running,  1 node x 2 workers:   %.3f\n' "$(printf '%s\n' "${single_all[@]}" | median)"
printf '  launch -> first worker running, 2 nodes x 2 workers:  %.3f\n' "$(printf '%s\n' "${multi_first[@]}" | median)"
printf '  launch -> all workers running,  2 nodes x 2 workers:  %.3f\n' "$(printf '%s\n' "${multi_all[@]}" | median)"
printf '  worker crash -> all 4 workers of the new round running: %.3f\n' "$(printf '%s\n' "${recovery[@]}" | median)"
