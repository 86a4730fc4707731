#!/usr/bin/env bash
# etcd rendezvous benchmark: starts a private etcd on free loopback ports (never 2379), then
# prints medians of REPS runs (default 3):
#   launch -> all 4 workers running               (2 agents x 2 workers, --rdzv-backend etcd)
#   worker crash -> all 4 workers of the new round running (rank 3 exits 1 one second in)
#   agent SIGKILL -> the survivor's new round running (--nnodes 1:2, last_call_timeout=0.5,
#       for lease TTLs of 2 s and 5 s: detection takes about one TTL)
# Worker timestamps come from `date +%s.%N` in the worker itself.
# Usage: bench/etcd_recovery.sh [build-dir]
set -euo pipefail
build=${1:-build}
cadre=$(cd "$build" && pwd)/bin/cadre
reps=${REPS:-3}
tmp=$(mktemp -d)
etcd_pid=
cleanup() { [ -n "$etcd_pid" ] && kill -9 "$etcd_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
client=$(free_port); peer=$(free_port)
# etcd reads ETCD_* variables as flags: start it without them.
env $(env | grep -o '^ETCD[A-Z_]*' | sed 's/^/-u /') etcd --data-dir "$tmp/etcd" \
  --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "default=http://127.0.0.1:$peer" >"$tmp/etcd.log" 2>&1 &
etcd_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$client/health" >/dev/null && break; sleep 0.1; done

cat > "$tmp/worker.sh" <<'WORKER'
#!/bin/sh
dir=$1; mode=$2
date +%s.%N > "$dir/start.$TORCHELASTIC_RESTART_COUNT.$WORLD_SIZE.$RANK.$$"
if [ "$mode" = crash ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 3 ]; then
  sleep 1; date +%s.%N > "$dir/crash"; exit 1
fi
while [ ! -f "$dir/finish" ]; do sleep 0.05; done
WORKER

now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f\n", a - b }'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
latest() { cat "$@" | sort -g | tail -1; }
wait_for() { for _ in $(seq 600); do eval "$1" && return 0; sleep 0.05; done; echo "timed out: $1" >&2; exit 1; }
agent() {  # agent <dir> <id> <nnodes> <nproc> <conf> <mode>; run it with &: exec makes $! the agent
  exec "$cadre" run --rdzv-backend etcd --rdzv-endpoint "127.0.0.1:$client" --rdzv-id "$2" --nnodes "$3" \
    --nproc-per-node "$4" --max-restarts 1 --rdzv-conf "$5" --log-dir "$1/logs$RANDOM" \
    -- /bin/sh "$tmp/worker.sh" "$1" "$6" >/dev/null 2>&1
}

launch=(); crash=(); kill2=(); kill5=()
for ((i = 0; i < reps; i++)); do
  d="$tmp/crash$i"; mkdir -p "$d"
  t0=$(now)
  agent "$d" crash$i 2 2 last_call_timeout=1 crash & a=$!
  agent "$d" crash$i 2 2 last_call_timeout=1 crash & b=$!
  wait_for "[ \$(ls $d | grep -c '^start\.1\.') -ge 4 ]"
  launch+=("$(sub "$(latest "$d"/start.0.*)" "$t0")")
  crash+=("$(sub "$(latest "$d"/start.1.*)" "$(cat "$d/crash")")")
  touch "$d/finish"; wait $a $b

  for ttl in 2 5; do
    d="$tmp/kill$ttl.$i"; mkdir -p "$d"
    conf="last_call_timeout=0.5,heartbeat_timeout=$ttl"
    agent "$d" kill$ttl.$i 1:2 1 "$conf" wait & a=$!
    agent "$d" kill$ttl.$i 1:2 1 "$conf" wait & b=$!
    wait_for "[ \$(ls $d | grep -c '^start\.0\.2\.') -ge 2 ]"
    kill -9 $b; t_kill=$(now); wait $b 2>/dev/null || true
    wait_for "[ \$(ls $d | grep -c '^start\.0\.1\.') -ge 1 ]"
    if [ "$ttl" = 2 ]; then kill2+=("$(sub "$(latest "$d"/start.0.1.*)" "$t_kill")")
    else kill5+=("$(sub "$(latest "$d"/start.0.1.*)" "$t_kill")"); fi
    touch "$d/finish"; wait $a
  done
done

printf 'cadre run over etcd (%d runs each, median seconds)\n' "$reps"
printf '  launch -> all 4 workers running, 2 agents x 2 workers:   %.3f\n' "$(printf '%s\n' "${launch[@]}" | median)"
printf '  worker crash -> all 4 workers of the new round running:  %.3f\n' "$(printf '%s\n' "${crash[@]}" | median)"
printf '  agent SIGKILL -> survivor running again, lease TTL 2 s:  %.3f\n' "$(printf '%s\n' "${kill2[@]}" | median)"
printf '  agent SIGKILL -> survivor running again, lease TTL 5 s:  %.3f\n' "$(printf '%s\n' "${kill5[@]}" | median)"
