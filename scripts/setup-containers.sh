#!/usr/bin/env bash
# Install and configure the container tools the trainer image is built and run with (idempotent).
#
#   scripts/setup-containers.sh            install what is missing, write the config, check it works
#
# Debian's podman (with runc), mmdebstrap (a Debian root filesystem without a registry, for the
# CPU image's base) and docker-compose (the SageMaker SDK's local mode drives it through the
# `docker` client against `podman system service`). Needs root for apt; skips apt when all are there.
#
# /etc/containers/containers.conf.d/50-trainctl.conf says what this host needs:
#   runtime = "runc"      crun refuses this kind of host's hybrid cgroup layout;
#   default_ulimits = []  podman's default raises RLIMIT_NPROC, which is not permitted here.
set -euo pipefail
say() { echo "setup-containers: $*" >&2; }
CONF_DIR=/etc/containers/containers.conf.d
CONF=$CONF_DIR/50-trainctl.conf

need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v docker-compose >/dev/null || need+=(docker-compose)
# The SDK's local mode also calls the `docker` client (`docker images`/`docker pull`, sagemaker/local/image.py);
# Debian's podman-docker provides it as a podman wrapper where no docker client is installed.
command -v docker >/dev/null || need+=(podman-docker)
command -v fuse-overlayfs >/dev/null || need+=(fuse-overlayfs)
# Debian's podman recommends these; a container network (SageMaker local mode) needs them.
[ -e /usr/lib/cni ] || [ -e /usr/lib/podman/netavark ] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
# With the CNI backend, containers on one network resolve each other's names (SageMaker's algo-1..N)
# only through the dnsname plugin; netavark brings aardvark-dns instead.
[ -e /usr/lib/podman/netavark ] || [ -e /usr/lib/cni/dnsname ] || need+=(golang-github-containernetworking-plugin-dnsname)
if [ "${#need[@]}" -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { say "missing ${need[*]}; run as root to install them with apt"; exit 1; }
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ "$(id -u)" = 0 ]; then
  mkdir -p "$CONF_DIR"
  want=$'# Written by trainctl scripts/setup-containers.sh.\n[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"'
  if [ "$(cat "$CONF" 2>/dev/null)" != "$want" ]; then
    printf '%s\n' "$want" >"$CONF"
    say "wrote $CONF"
  fi
fi

# The check: podman answers and uses runc.
rt=$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>&1) || { say "podman info failed: $rt"; exit 1; }
[ "$rt" = runc ] || { say "podman's OCI runtime is '$rt', expected runc ($CONF)"; exit 1; }
say "ok (podman $(podman version --format '{{.Client.Version}}'), runtime $rt, storage $(podman info --format '{{.Store.GraphDriverName}}'))"
