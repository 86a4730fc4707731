# A private two-node Slurm cluster for tests, sourced by test scripts (bash, set -euo pipefail):
# nodes n1 and n2 on 127.0.0.1, its own munged socket, config, ports and state in a temp dir.
#   slurm_cluster_up        starts munged, slurmctld and two slurmd; sets $tmp and exports SLURM_CONF
#   trap slurm_cluster_down EXIT   stops everything and removes $tmp, also on failure
#   wait_for SECONDS CMD... polls CMD until it succeeds (10 Hz) or the deadline passes
#   fail MESSAGE            prints the message and the daemons' logs, exits 1
# slurm-wlm and munge come from scripts/setup.sh. cred_expire=10: a requeued job waits this long
# before it may start again (Slurm's default is 120 s); sched_interval=2: pending jobs are looked at
# every 2 s (default 60 s); MinJobAge=3600: finished jobs stay visible to scontrol for an hour.

wait_for() {  # wait_for SECONDS COMMAND...: polls until the command succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do ((SECONDS < deadline)) || return 1; sleep 0.1; done
}
gone() { [[ ! -e /proc/$1 ]] || [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == Z ]]; }
# N distinct free loopback ports: all bound at once while they are picked. One at a time, the
# kernel may hand out a port twice (a CI run's controller got node n2's port: "Address already
# in use", and n2 received the controller's messages).
free_ports() {
  /usr/bin/python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}
fail() { echo "FAIL: $*"; for f in "$tmp"/log/*; do [[ -f $f ]] && { echo "== $f"; tail -20 "$f"; }; done; exit 1; }

tmp=""
munged_pid=""
slurm_pids=()

slurm_cluster_down() {
  [[ -n ${tmp:-} ]] || return 0  # never started: nothing of ours to look for
  # Let finished steps report to the controller, then shut Slurm down; munge goes last (slurmd
  # and slurmstepd need it to say goodbye). Anything left is killed: daemons by pid, step daemons
  # and jobs (re-parented away from us) by the temp dir in their environment.
  if [[ -n ${SLURM_CONF:-} ]]; then
    scancel --user="$(id -un)" >/dev/null 2>&1 || true
    wait_for 20 test -z "$(squeue -h 2>/dev/null)" || true
    scontrol shutdown >/dev/null 2>&1 || true
  fi
  local p e
  for p in "${slurm_pids[@]}"; do wait_for 20 gone "$p" || kill -9 "$p" 2>/dev/null || true; done
  for e in /proc/[0-9]*/environ; do
    if grep -qs "$tmp" "$e"; then p=${e#/proc/}; p=${p%/environ}; [[ $p != "$$" ]] && kill -9 "$p" 2>/dev/null || true; fi
  done
  if [[ -n $munged_pid ]]; then kill "$munged_pid" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$tmp"
}

slurm_cluster_up() {
  tmp=$(mktemp -d /tmp/cadre-slurm-test-XXXXXX)
  mkdir -p "$tmp/log" "$tmp/state" "$tmp/spool/n1" "$tmp/spool/n2"
  /usr/sbin/munged --foreground --force --socket="$tmp/munge.sock" --key-file=/etc/munge/munge.key \
    --pid-file="$tmp/munged.pid" --seed-file="$tmp/munge.seed" --log-file="$tmp/log/munged.log" &
  munged_pid=$!
  wait_for 10 test -S "$tmp/munge.sock" || fail "munged did not start"

  local ctld_port n1_port n2_port
  read -r ctld_port n1_port n2_port < <(free_ports 3)
  cat > "$tmp/slurm.conf" <<CONF
ClusterName=cadretest
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge.sock,cred_expire=10
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
SchedulerParameters=sched_interval=2,bf_interval=2
MinJobAge=3600
NodeName=n1 NodeAddr=127.0.0.1 Port=$n1_port CPUs=2 State=UNKNOWN
NodeName=n2 NodeAddr=127.0.0.1 Port=$n2_port CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF=$tmp/slurm.conf  # also marks the step daemons' environment for cleanup
  /usr/sbin/slurmctld -D -i -f "$SLURM_CONF" >"$tmp/log/slurmctld.out" 2>&1 &
  slurm_pids+=($!)
  local n
  for n in n1 n2; do
    /usr/sbin/slurmd -D -N "$n" -f "$SLURM_CONF" >"$tmp/log/slurmd-$n.out" 2>&1 &
    slurm_pids+=($!)
  done
  idle_nodes() { [[ $(sinfo -h -N -t idle -o %N | sort -u | wc -l) == 2 ]]; }
  wait_for 60 idle_nodes || fail "slurm nodes did not come up"
}
