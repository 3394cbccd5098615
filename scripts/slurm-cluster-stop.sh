#!/usr/bin/env bash
# Stop the test cluster started by scripts/slurm-cluster.sh: its jobs, slurmd(s), slurmctld and
# the /etc/hosts line for the virtual nodes. munged keeps running (harmless, shared by others).
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
for f in /run/slurmd-*.pid /run/slurmd.pid; do
  [ -e "$f" ] && stop_pid_file "$f"
done
stop_pid_file /run/slurmctld.pid

if grep -q '# trainctl-slurm-virtual-nodes' /etc/hosts 2>/dev/null; then
  # /etc/hosts may be a bind mount (containers): rewrite it in place rather than replacing the file.
  kept=$(grep -v '# trainctl-slurm-virtual-nodes' /etc/hosts)
  printf '%s\n' "$kept" >/etc/hosts
fi
say "stopped"
