#!/usr/bin/env bash
# Start a real SLURM cluster on this host for trainctl's tests and demos (Debian slurm-wlm).
#
#   scripts/slurm-cluster.sh [NODES] [CPUS_PER_NODE]          default: 2 virtual nodes x 4 CPUs
#   scripts/slurm-cluster.sh --netns NODES [CPUS_PER_NODE]    NODES virtual nodes that are hosts to each other
#   scripts/slurm-cluster-stop.sh                              stops either again
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
#
# --netns: each virtual node nI is a host of its own, so a launcher that picks a wrong address fails here
# as it would on a real cluster (in the mode above every node is 127.0.0.1):
# - its own network namespace `trainctl-nI` whose only link, eth0, is one end of a veth pair; the other
#   end, `tcl-nI`, is a port of the bridge `trainctl0` (10.201.24.1/24, this host's address on it);
# - its own address 10.201.24.(10+I), mapped to nI in /etc/hosts (one marked line per node), and no
#   default route: nothing a node sends can leave 10.201.24.0/24 (IPv6 is off on every link of it);
# - its own hostname nI (a UTS namespace, `unshare --uts`) and its own slurmd on port 6818 of its address,
#   started inside both, and inside the cgroup v1 `cpu` group /sys/fs/cgroup/cpu/trainctl-slurm/nI,
#   so its job steps inherit a CPU quota set there (the fault tools of tests/support/cluster_faults.py);
# - slurmctld stays in this namespace; nodes reach it at the bridge's address 10.201.24.1. munged's
#   socket is a file, so every node shares it. SlurmdTimeout=20 (SLURM's default is 300 s) lets
#   slurmctld mark a node that stopped answering DOWN within about half a minute.
# Where br_netfilter is on (it is on the machine this was written on), bridged frames cross the FORWARD
# chain, so one marked FORWARD rule accepts frames from the bridge to itself. The stop script removes
# every namespace, veth, the bridge, that rule, the qdiscs (with the veths), the cgroups and the
# /etc/hosts lines, and points slurm.conf back at 127.0.0.1. Needs ip, iptables, nsenter and unshare.
set -euo pipefail
NETNS=0
if [ "${1:-}" = --netns ]; then
  NETNS=1
  shift
fi
NNODES=${1:-2}
CPUS=${2:-4}
HOST=$(hostname -s)
CONF_DIR=/etc/slurm
HOSTS_MARK="# trainctl-slurm-virtual-nodes"
# --netns: the bridge's /24 (nothing else on a machine that runs these tests may use it), its names
SUBNET=10.201.24
BRIDGE=trainctl0
CGROUP=/sys/fs/cgroup/cpu/trainctl-slurm
say() { echo "slurm-cluster: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "must run as root (it starts munged, slurmctld and slurmd)"; exit 1; }
case "$NNODES" in '' | *[!0-9]* | 0) say "NODES must be a positive integer, got '$NNODES'"; exit 2 ;; esac
case "$CPUS" in '' | *[!0-9]* | 0) say "CPUS_PER_NODE must be a positive integer, got '$CPUS'"; exit 2 ;; esac
if [ "$NETNS" = 1 ]; then
  if [ "$NNODES" -lt 2 ] || [ "$NNODES" -gt 99 ]; then
    say "--netns needs 2 to 99 nodes, got $NNODES"
    exit 2
  fi
  for tool in ip iptables nsenter unshare; do
    command -v "$tool" >/dev/null || { say "--netns needs $tool (iproute2, iptables, util-linux)"; exit 1; }
  done
fi

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
CTLD_ADDR=127.0.0.1
[ "$NETNS" = 0 ] || CTLD_ADDR=$SUBNET.1
REAL_MEM=$(slurmd -C | grep -oP 'RealMemory=\K[0-9]+')
MEM=$((REAL_MEM * 8 / 10 / NNODES))
mkdir -p "$CONF_DIR" /var/spool/slurmctld /var/log/slurm
{
  cat <<CONF
# Written by trainctl scripts/slurm-cluster.sh: a test cluster on one host.
# Mode: $([ "$NETNS" = 1 ] && echo "--netns (slurm-cluster-stop.sh points SlurmctldHost at 127.0.0.1)" || echo plain)
ClusterName=trainctl
SlurmctldHost=${HOST}(${CTLD_ADDR})
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
  if [ "$NETNS" = 1 ]; then
    echo "SlurmdPort=6818"
    echo "SlurmdTimeout=20"
    echo "SlurmdParameters=config_overrides"
    for i in $(seq 1 "$NNODES"); do
      echo "NodeName=n$i NodeHostname=n$i NodeAddr=$SUBNET.$((10 + i)) CPUs=${CPUS} Sockets=1 CoresPerSocket=${CPUS} ThreadsPerCore=1 RealMemory=${MEM} Gres=gpu:1 Feature=cpu,localtest State=UNKNOWN"
    done
  elif [ "$NNODES" -eq 1 ]; then
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

# --netns: one host per node (see the header); what it makes is named so the stop script finds it.
netns_up() {
  if ip -o -4 addr show | grep -q " $SUBNET\." || ip -4 route show | grep -q "^$SUBNET\."; then
    say "$SUBNET.0/24 is already in use on this machine (ip addr / ip route); --netns needs it free"
    exit 1
  fi
  ip link add "$BRIDGE" type bridge
  sysctl -qw "net.ipv6.conf.$BRIDGE.disable_ipv6=1"
  ip addr add "$SUBNET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment trainctl-slurm-netns -j ACCEPT
  mkdir -p "$CGROUP"
  local i n ns
  for i in $(seq 1 "$NNODES"); do
    n=n$i ns=trainctl-n$i
    ip netns add "$ns"
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip link add "tcl-$n" type veth peer name eth0 netns "$ns"
    sysctl -qw "net.ipv6.conf.tcl-$n.disable_ipv6=1"
    ip link set "tcl-$n" master "$BRIDGE" up
    ip -n "$ns" addr add "$SUBNET.$((10 + i))/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    mkdir -p "$CGROUP/$n"
    echo "$SUBNET.$((10 + i)) $n $HOSTS_MARK" >>/etc/hosts
  done
}

# slurmd -N nI inside nI's cgroup, network namespace and a new UTS namespace named nI (it daemonizes there).
# nsenter, not `ip netns exec`: that also remounts /sys, which hides /sys/fs/cgroup, and slurmd 22.05
# will not start without it ("No filesystem mounted on /sys/fs/cgroup").
start_netns_slurmd() {  # -N NODE, as slurmd takes it
  local n=$2
  # shellcheck disable=SC2016  # $1 and $2 expand in the inner shell
  sh -c 'echo $$ >"$1/cgroup.procs" && exec nsenter --net="/run/netns/trainctl-$2" unshare --uts sh -c "hostname $2 && exec slurmd -N $2"' \
    _ "$CGROUP/$n" "$n"
}

if [ "$NNODES" -eq 1 ]; then
  NODES=$HOST
else
  NODES=$(seq -f 'n%g' 1 "$NNODES" | tr '\n' ' ')
  if [ "$NETNS" = 1 ]; then
    netns_up
  else
    # Virtual node names must resolve: the launcher's rendezvous master is the allocation's first node.
    echo "127.0.0.1 $NODES $HOSTS_MARK" >>/etc/hosts
  fi
fi

# Old state would bring back jobs from an earlier cluster.
rm -rf /var/spool/slurmctld/*
for n in $NODES; do
  rm -rf "/var/spool/slurmd/$n"
  mkdir -p "/var/spool/slurmd/$n"
done
slurmctld
for n in $NODES; do
  if [ "$NETNS" = 1 ]; then started=start_netns_slurmd; else started=slurmd; fi
  if ! "$started" -N "$n"; then
    say "slurmd of $n did not start; last lines of its log:"
    tail -n 20 "/var/log/slurm/slurmd-$n.log" >&2 || true
    exit 1
  fi
done
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
if [ "$NETNS" = 1 ]; then
  for i in $(seq 1 "$NNODES"); do
    # shellcheck disable=SC2016  # expands on the node, not here
    seen=$(nsenter -t "$(cat "/run/slurmd-n$i.pid")" -n -u sh -c 'echo "$(hostname) $(getent ahostsv4 "$(hostname)" | sed -n "1s/ .*//p")"')
    [ "$seen" = "n$i $SUBNET.$((10 + i))" ] || { say "n$i's slurmd sees itself as '$seen'"; exit 1; }
  done
  say "up: $NNODES host(s) x $CPUS CPUs on $BRIDGE $SUBNET.0/24 ($NODES)"
  exit 0
fi
say "up: $NNODES node(s) x $CPUS CPUs ($NODES)"
