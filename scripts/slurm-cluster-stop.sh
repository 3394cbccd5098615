#!/usr/bin/env bash
# Stop the test cluster started by scripts/slurm-cluster.sh: its jobs, slurmd(s), slurmctld and
# the /etc/hosts line(s) for the virtual nodes. munged keeps running (harmless, shared by others).
# A --netns cluster also loses what that mode made: every process left in a node's namespace
# (SIGKILL), the namespaces trainctl-nI, the veths tcl-nI (their qdiscs go with them), the bridge
# trainctl0, the marked FORWARD rule and the cgroups /sys/fs/cgroup/cpu/trainctl-slurm/nI; its
# slurm.conf is pointed back at 127.0.0.1.
#   scripts/slurm-cluster-stop.sh [--quiet]
set -euo pipefail
QUIET=${1:-}
say() { [ "$QUIET" = --quiet ] || echo "slurm-cluster-stop: $*" >&2; }
[ "$(id -u)" = 0 ] || { echo "slurm-cluster-stop: must run as root" >&2; exit 1; }

if command -v scancel >/dev/null && [ -f /run/slurmctld.pid ]; then
  timeout 10 scancel --full --quiet --user=root 2>/dev/null || true
fi

# Stop each daemon by the pid it wrote, and wait until it is gone.
stop_pid_file() {
  local file=$1 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}
# The slurmds at once: each takes a second or two to exit, and a --netns cluster has one per node.
for f in /run/slurmd-*.pid /run/slurmd.pid; do
  [ -e "$f" ] && stop_pid_file "$f" &
done
wait
stop_pid_file /run/slurmctld.pid

# --netns leftovers, found by their names (no state file to lose).
kill_all() {  # SIGKILL these pids and wait (5 s at most) until they are gone
  local pid alive
  [ $# -gt 0 ] || return 0
  kill -KILL "$@" 2>/dev/null || true
  for _ in $(seq 1 50); do
    alive=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0
    sleep 0.1
  done
}
if command -v ip >/dev/null; then
  for ns in $(ip netns list | awk '$1 ~ /^trainctl-n[0-9]+$/ {print $1}'); do
    # shellcheck disable=SC2046  # one pid per word
    kill_all $(ip netns pids "$ns")
    ip netns del "$ns"
  done
  for link in $(ip -o link show | grep -oE '^[0-9]+: tcl-n[0-9]+' | cut -d' ' -f2); do
    ip link del "$link" 2>/dev/null || true  # gone already when its peer's namespace went
  done
  ! ip link show trainctl0 >/dev/null 2>&1 || ip link del trainctl0
fi
if command -v iptables >/dev/null; then
  rule=(FORWARD -i trainctl0 -o trainctl0 -m comment --comment trainctl-slurm-netns -j ACCEPT)
  while iptables -C "${rule[@]}" 2>/dev/null; do iptables -D "${rule[@]}"; done
fi
CGROUP=/sys/fs/cgroup/cpu/trainctl-slurm
if [ -d "$CGROUP" ]; then
  for group in "$CGROUP"/*/; do
    [ -f "$group/cgroup.procs" ] || continue
    # shellcheck disable=SC2046
    kill_all $(cat "$group/cgroup.procs")
    rmdir "$group"
  done
  rmdir "$CGROUP"
fi

# A --netns slurm.conf names slurmctld by the bridge's address: with the bridge gone, a SLURM command
# would send its request out of the default route (and with no slurm.conf, SLURM asks DNS for one).
# Point it at 127.0.0.1, where a stopped cluster's commands are refused at once, as in the plain mode.
if grep -q '^# Mode: --netns' /etc/slurm/slurm.conf 2>/dev/null; then
  sed -i -e 's/^\(SlurmctldHost=[^(]*\)(10\.201\.24\.1)$/\1(127.0.0.1)/' \
    -e 's/^# Mode: --netns.*/# Mode: --netns, stopped (slurmctld pointed at 127.0.0.1)/' /etc/slurm/slurm.conf
fi

if grep -q '# trainctl-slurm-virtual-nodes' /etc/hosts 2>/dev/null; then
  # /etc/hosts may be a bind mount (containers): rewrite it in place rather than replacing the file.
  kept=$(grep -v '# trainctl-slurm-virtual-nodes' /etc/hosts)
  printf '%s\n' "$kept" >/etc/hosts
fi
say "stopped"
