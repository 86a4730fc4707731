#!/bin/bash
# Test "hosts" on one machine: network namespaces <prefix>h0..h<n-1>, each with an eth0 at
# 10.77.0.(10+i)/24, plugged into a bridge that lives in its own namespace <prefix>sw (so no
# interface, address or route is added to the root namespace and parallel runs cannot collide).
# The bridge itself answers at 10.77.0.1: services that are on no host (an etcd) run there.
#   netns_hosts.sh up PREFIX N        create the switch and N hosts (removes leftovers of PREFIX first)
#   netns_hosts.sh down PREFIX        kill every process in PREFIX's namespaces, delete them (idempotent)
#   netns_hosts.sh cut PREFIX I       switch port of host I down: its packets vanish, nobody is told
#   netns_hosts.sh heal PREFIX I      switch port of host I up again
#   netns_hosts.sh kill PREFIX I      SIGKILL every process inside host I (a crashed machine)
#   netns_hosts.sh pids PREFIX I      pids of the processes inside host I
#   netns_hosts.sh reap-stale BASE    `down` every BASE<pid>- prefix whose owner pid is gone
# Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN). Exits non-zero with a message on any failure.
set -euo pipefail

die() { echo "netns_hosts.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces); running as uid $(id -u)"
command -v ip >/dev/null || die "iproute2 ('ip') is not installed"

cmd=${1:-}; prefix=${2:-}
[ -n "$cmd" ] && [ -n "$prefix" ] || die "usage: $0 up|down|cut|heal|kill|pids|reap-stale PREFIX [N|I]"

namespaces_of() { ip netns list | awk '{print $1}' | grep -E "^$1(h[0-9]+|sw)\$" || true; }

kill_all_in() {  # SIGKILL every process in namespace $1 until none is left (forks may race)
  local ns=$1 tries=0 pids
  while pids=$(ip netns pids "$ns" 2>/dev/null) && [ -n "$pids" ]; do
    kill -9 $pids 2>/dev/null || true
    tries=$((tries + 1))
    [ $tries -lt 200 ] || die "processes in $ns survive SIGKILL: $pids"
    sleep 0.02
  done
}

down() {
  local ns
  for ns in $(namespaces_of "$1"); do kill_all_in "$ns"; done
  for ns in $(namespaces_of "$1"); do ip netns del "$ns" || die "cannot delete namespace $ns"; done
}

case $cmd in
  up)
    n=${3:?number of hosts}
    down "$prefix"
    sw="${prefix}sw"
    ip netns add "$sw"
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" addr add 10.77.0.1/24 dev br0
    ip -n "$sw" link set br0 up
    ip -n "$sw" link set lo up
    for i in $(seq 0 $((n - 1))); do
      h="${prefix}h$i"
      ip netns add "$h"
      ip -n "$sw" link add "v$i" type veth peer name eth0 netns "$h"
      ip -n "$sw" link set "v$i" master br0 up
      ip -n "$h" addr add "10.77.0.$((10 + i))/24" dev eth0
      ip -n "$h" link set eth0 up
      ip -n "$h" link set lo up
    done ;;
  down) down "$prefix" ;;
  cut) ip -n "${prefix}sw" link set "v${3:?host index}" down ;;
  heal) ip -n "${prefix}sw" link set "v${3:?host index}" up ;;
  kill) kill_all_in "${prefix}h${3:?host index}" ;;
  pids) ip netns pids "${prefix}h${3:?host index}" ;;
  reap-stale)
    for p in $(ip netns list | awk '{print $1}' | sed -nE "s/^(${prefix}[0-9]+-).*/\1/p" | sort -u); do
      owner=${p#"$prefix"}; owner=${owner%-}
      if ! kill -0 "$owner" 2>/dev/null; then echo "removing leftovers of dead run $p"; down "$p"; fi
    done ;;
  *) die "unknown command '$cmd'" ;;
esac
