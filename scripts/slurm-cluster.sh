#!/usr/bin/env bash
# Start a real SLURM cluster on this host for trainctl's tests and demos (Debian slurm-wlm).
#
#   scripts/slurm-cluster.sh [NODES] [CPUS_PER_NODE]     default: 2 virtual nodes x 4 CPUs
#   scripts/slurm-cluster-stop.sh                         stops it again
#
# Needs root. Installs `munge slurmctld slurmd slurm-client` with apt if they are missing.
# NODES=1 runs one slurmd named after this host; NODES>1 runs one slurmd per virtual node
# n1..nN on this host (SlurmdParameters=config_overrides lets each advertise CPUS_PER_NODE,
# so a 2 x 2-process job fits on a 2-core machine; they share the cores).
# Virtual node names are not in DNS, but the trainer launcher connects to the first node of the
# allocation by name, so this script maps n1..nN to 127.0.0.1 in /etc/hosts (one marked line,
# removed by slurm-cluster-stop.sh).
# MinJobAge=3600 keeps finished jobs visible to `scontrol show job` for an hour (accounting is off,
# so sacct cannot answer), and KillWait=10 gives a signalled trainer time to checkpoint.
# Nodes advertise the feature `localtest` and one fake GPU (gres.conf, backed by /dev/null) so rendered GPU
# and --constraint scripts can be checked with `sbatch --test-only`; no job here uses a GPU.
set -euo pipefail
NNODES=${1:-2}
CPUS=${2:-4}
HOST=$(hostname -s)
CONF_DIR=/etc/slurm
HOSTS_MARK="# trainctl-slurm-virtual-nodes"
say() { echo "slurm-cluster: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "must run as root (it starts munged, slurmctld and slurmd)"; exit 1; }
case "$NNODES" in '' | *[!0-9]* | 0) say "NODES must be a positive integer, got '$NNODES'"; exit 2 ;; esac
case "$CPUS" in '' | *[!0-9]* | 0) say "CPUS_PER_NODE must be a positive integer, got '$CPUS'"; exit 2 ;; esac

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
  || ! command -v munged >/dev/null; then
  say "installing munge slurmctld slurmd slurm-client"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends munge slurmctld slurmd slurm-client >/dev/null
fi

# A cluster from an earlier start (maybe with another shape) goes first.
bash "$(dirname "$0")/slurm-cluster-stop.sh" --quiet

# munge: the package's postinst creates a key; make one if it did not.
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
fi
install -d -o munge -g munge -m 0755 /run/munge
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
  su -s /bin/sh munge -c /usr/sbin/munged
fi
for _ in $(seq 1 50); do munge -n </dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
munge -n </dev/null | unmunge >/dev/null || { say "munged did not start"; exit 1; }

NODE_EXPR=$HOST
[ "$NNODES" -eq 1 ] || NODE_EXPR="n[1-$NNODES]"
REAL_MEM=$(slurmd -C | grep -oP 'RealMemory=\K[0-9]+')
MEM=$((REAL_MEM * 8 / 10 / NNODES))
mkdir -p "$CONF_DIR" /var/spool/slurmctld /var/log/slurm
{
  cat <<CONF
# Written by trainctl scripts/slurm-cluster.sh: a test cluster on one host.
ClusterName=trainctl
SlurmctldHost=${HOST}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
ReturnToService=2
MailProg=/bin/true
SlurmctldPort=6817
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=3600
KillWait=10
GresTypes=gpu
CONF
  if [ "$NNODES" -eq 1 ]; then
    echo "SlurmdPort=6818"
    echo "SlurmdParameters=config_overrides"
    echo "NodeName=${HOST} NodeAddr=127.0.0.1 CPUs=${CPUS} Sockets=1 CoresPerSocket=${CPUS} ThreadsPerCore=1 RealMemory=${MEM} Gres=gpu:1 Feature=cpu,localtest State=UNKNOWN"
  else
    echo "SlurmdParameters=config_overrides"
    for i in $(seq 1 "$NNODES"); do
      echo "NodeName=n$i NodeHostname=${HOST} NodeAddr=127.0.0.1 Port=$((17000 + i)) CPUs=${CPUS} Sockets=1 CoresPerSocket=${CPUS} ThreadsPerCore=1 RealMemory=${MEM} Gres=gpu:1 Feature=cpu,localtest State=UNKNOWN"
    done
  fi
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} >"$CONF_DIR/slurm.conf"
# One "GPU" per node backed by /dev/null: only so that GPU job scripts (--gpus-per-node=1,
# --gres=gpu:1) pass `sbatch --test-only`; nothing here runs on a GPU.
echo "NodeName=${NODE_EXPR} Name=gpu File=/dev/null Count=1" >"$CONF_DIR/gres.conf"

if [ "$NNODES" -eq 1 ]; then
  NODES=$HOST
else
  NODES=$(seq -f 'n%g' 1 "$NNODES" | tr '\n' ' ')
  # Virtual node names must resolve: the launcher's rendezvous master is the allocation's first node.
  echo "127.0.0.1 $NODES $HOSTS_MARK" >>/etc/hosts
fi

# Old state would bring back jobs from an earlier cluster.
rm -rf /var/spool/slurmctld/*
for n in $NODES; do
  rm -rf "/var/spool/slurmd/$n"
  mkdir -p "/var/spool/slurmd/$n"
done
slurmctld
for n in $NODES; do slurmd -N "$n"; done
for _ in $(seq 1 150); do
  [ "$(sinfo -h -t idle -o '%D' 2>/dev/null)" = "$NNODES" ] && break
  sleep 0.2
done
if [ "$(sinfo -h -t idle -o '%D' 2>/dev/null)" != "$NNODES" ]; then
  say "nodes did not become idle; last lines of the logs:"
  tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd-*.log >&2 || true
  sinfo >&2 || true
  exit 1
fi
for n in $NODES; do
  getent hosts "$n" >/dev/null || { say "node name $n does not resolve"; exit 1; }
done
say "up: $NNODES node(s) x $CPUS CPUs ($NODES)"
