#!/usr/bin/env bash
# Build and smoke-test the trainer image with podman or docker, whichever is installed.
#
#   scripts/image.sh build [--flavor cpu|cuda] [--tag REF]   build; prints the image reference last
#   scripts/image.sh build --image controller [--tag REF]    the controller's image (controller.Dockerfile)
#   scripts/image.sh smoke REF                                the checks CI runs on a built image
#   scripts/image.sh ref [--flavor cpu|cuda]                  the reference a build would print
#
# Flavors (one Dockerfile): `cuda` is the Dockerfile's defaults (NVIDIA's digest-pinned CUDA base;
# CI's .github/workflows/image.yml builds it with buildx); `cpu` adds trainer_image/flavor-cpu.args
# and a local Debian base: no registry has to be reachable, because the base is made here with
# mmdebstrap from Debian's packages and `podman import`ed as localhost/trainctl-base:<suite>-<hash>
# (kept, and reused while its recipe below is unchanged). pip inside the build gets the folder
# with torch's CPU wheel (pip's find-links, or TRAINCTL_WHEELS) and the host's CA bundle (pip's
# `cert`: registries may be reached through a TLS-intercepting proxy), both mounted read-only.
# Layers are cached by the engine, so a rebuild with unchanged inputs takes seconds.
# Environment: TRAINCTL_CONTAINER_RUNTIME=podman|docker picks the engine.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "image: $*" >&2; }
die() { say "$*"; exit 1; }

# The cpu flavor's base: Debian's minimal root filesystem plus the Python the cpu lock is for.
BASE_SUITE=bookworm
BASE_PACKAGES=python3.11,python3.11-venv,ca-certificates
BASE_RECIPE="mmdebstrap --variant=minbase --include=$BASE_PACKAGES $BASE_SUITE"

runtime() {
  local want=${TRAINCTL_CONTAINER_RUNTIME:-}
  if [ -n "$want" ]; then
    command -v "$want" >/dev/null || die "TRAINCTL_CONTAINER_RUNTIME=$want is not installed"
    echo "$want"
  elif command -v podman >/dev/null; then
    echo podman
  elif command -v docker >/dev/null; then
    echo docker
  else
    die "neither podman nor docker is installed: run scripts/setup-containers.sh (Debian) or install one"
  fi
}

version() { python3 -c 'import runpy; print(runpy.run_path("sdk/trainctl/version.py")["__version__"])'; }

reference() { echo "localhost/trainctl-trainer:$(version)-$1"; }

# Make (or reuse) the cpu flavor's Debian base; prints "NAME DIGEST".
cpu_base() {
  local rt=$1 key name tar digest
  key=$(printf '%s\n' "$BASE_RECIPE" | sha256sum | cut -c1-12)
  name="localhost/trainctl-base:${BASE_SUITE}-${key}"
  if ! "$rt" image inspect "$name" >/dev/null 2>&1; then
    command -v mmdebstrap >/dev/null || die "mmdebstrap is needed to make the cpu base $name: run scripts/setup-containers.sh"
    say "making the base $name ($BASE_RECIPE)"
    tar=$(mktemp --suffix=.tar)
    # shellcheck disable=SC2086  # the recipe is words on purpose
    $BASE_RECIPE "$tar" >&2 2>/dev/null || { rm -f "$tar"; die "mmdebstrap failed: $BASE_RECIPE"; }
    "$rt" import --change 'CMD ["/bin/bash"]' "$tar" "$name" >/dev/null
    rm -f "$tar"
  fi
  digest=$("$rt" image inspect "$name" --format '{{.Digest}}')
  [ -n "$digest" ] || die "the base $name has no digest"
  echo "$name $digest"
}

# pip's find-links folder holding torch's CPU wheel, or the PyTorch CPU index when there is none here.
wheel_source() {
  local d=${TRAINCTL_WHEELS:-}
  if [ -z "$d" ]; then
    d=$(pip3 config get global.find-links 2>/dev/null || true)
    [ -n "$d" ] || d=${PIP_FIND_LINKS:-}
  fi
  if [ -n "$d" ] && compgen -G "$d/torch-*+cpu-*.whl" >/dev/null; then echo "$d"; fi
}

ca_bundle() {
  local c=${PIP_CERT:-}
  [ -n "$c" ] || c=$(pip3 config get global.cert 2>/dev/null || true)
  [ -n "$c" ] || c=/etc/ssl/certs/ca-certificates.crt
  [ -f "$c" ] && echo "$c"
}

# The controller's image: the SDK and the kubernetes client on Debian's Python (with podman, on the cpu
# flavor's local Debian base; with docker, the Dockerfile's debian:bookworm-slim). Its context is a folder
# holding only what it installs, so the trainer's allow-list .dockerignore does not apply to it.
build_controller() {
  local tag=$1 rt base ctx ca args=() start
  rt=$(runtime)
  tag=${tag:-localhost/trainctl-controller:$(version)}
  start=$(date +%s)
  args=(--build-arg "VERSION=$(version)" --build-arg "REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)")
  if [ "$rt" = podman ]; then  # no registry needed: the cpu flavor's Debian base, made here
    read -r -a base < <(cpu_base "$rt")
    [ "${#base[@]}" = 2 ] || die "could not make the base"
    args+=(--build-arg "BASE_NAME=${base[0]}" --pull=never)
    if ca=$(ca_bundle); then
      args+=(-v "$(dirname "$ca"):/run/trainctl-ca:ro" --build-arg "PIP_CERT=/run/trainctl-ca/$(basename "$ca")")
    fi
  fi
  ctx=$(mktemp -d)
  cp pyproject.toml README.md controller.Dockerfile "$ctx/"
  tar -c --exclude=__pycache__ --exclude='*.py[cod]' sdk | tar -x -C "$ctx"
  say "building $tag with $rt"
  "$rt" build --network host -f "$ctx/controller.Dockerfile" -t "$tag" "${args[@]}" "$ctx" >&2 \
    || { rm -rf "$ctx"; die "$rt build failed (its output is above)"; }
  rm -rf "$ctx"
  say "built $tag in $(($(date +%s) - start))s"
  echo "$tag"
}

build() {
  local flavor=cuda tag="" rt args=() start image=trainer
  while [ $# -gt 0 ]; do
    case "$1" in
      --flavor) flavor=${2:?--flavor needs cpu or cuda}; shift 2 ;;
      --tag) tag=${2:?--tag needs a reference}; shift 2 ;;
      --image) image=${2:?--image needs trainer or controller}; shift 2 ;;
      *) say "unknown option '$1' (accepted: --flavor cpu|cuda, --image trainer|controller, --tag REF)"; exit 2 ;;
    esac
  done
  case "$image" in
    trainer) ;;
    controller) build_controller "$tag"; return ;;
    *) say "--image is '$image': accepted trainer, controller"; exit 2 ;;
  esac
  case "$flavor" in cpu | cuda) ;; *) say "--flavor is '$flavor': accepted cpu, cuda"; exit 2 ;; esac
  rt=$(runtime)
  tag=${tag:-$(reference "$flavor")}
  start=$(date +%s)
  args=(--build-arg "VERSION=$(version)" --build-arg "REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)")
  if [ "$flavor" = cpu ]; then
    local base wheels ca
    read -r -a base < <(cpu_base "$rt")
    [ "${#base[@]}" = 2 ] || die "could not make the cpu base"
    while IFS= read -r line; do
      case "$line" in '' | '#'*) ;; *) args+=(--build-arg "$line") ;; esac
    done <trainer_image/flavor-cpu.args
    args+=(--build-arg "BASE_NAME=${base[0]}" --build-arg "BASE_DIGEST=${base[1]}")
    wheels=$(wheel_source)
    if [ "$rt" = podman ]; then
      args+=(--pull=never)
      if [ -n "$wheels" ]; then
        args+=(-v "$wheels:/run/trainctl-wheels:ro" --build-arg PIP_FIND_LINKS=/run/trainctl-wheels)
      else
        args+=(--build-arg PIP_FIND_LINKS=https://download.pytorch.org/whl/cpu/torch/)
      fi
      if ca=$(ca_bundle); then
        args+=(-v "$(dirname "$ca"):/run/trainctl-ca:ro" --build-arg "PIP_CERT=/run/trainctl-ca/$(basename "$ca")")
      fi
    else
      # docker build mounts nothing: torch comes from the PyTorch CPU index, TLS from the image's CAs.
      args+=(--build-arg PIP_FIND_LINKS=https://download.pytorch.org/whl/cpu/torch/)
    fi
  fi
  say "building $tag with $rt (flavor $flavor)"
  "$rt" build --network host -f Dockerfile -t "$tag" "${args[@]}" . >&2 \
    || die "$rt build failed (its output is above)"
  say "built $tag, image id $("$rt" image inspect "$tag" --format '{{.Id}}'), in $(($(date +%s) - start))s"
  echo "$tag"
}

# The workflow's smoke test: torch and the trainer import, the versions inside match the labels,
# the entrypoint and `train` work, the launcher started as root drops to 10001, whose folders are
# writable, no compiler.
smoke() {
  local ref=${1:?usage: scripts/image.sh smoke REF} rt want have
  rt=$(runtime)
  label() { "$rt" image inspect "$ref" --format "{{ index .Config.Labels \"$1\" }}"; }
  "$rt" run --rm --entrypoint python "$ref" -c "import torch, trainer; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  if [ "$(label io.trainctl.flavor)" = cpu ]; then
    want="$(label io.trainctl.torch.version) $(label io.trainctl.python.version)"
    have=$("$rt" run --rm --entrypoint python "$ref" -c "import sys, torch, importlib.metadata as m; assert torch.version.cuda is None; print(m.version('torch'), '%d.%d' % sys.version_info[:2])")
  else
    want="$(label io.trainctl.torch.version) $(label io.trainctl.cuda.version) $(label io.trainctl.nccl.version) $(label io.trainctl.cudnn.version)"
    have=$("$rt" run --rm --entrypoint python "$ref" -c "import torch, importlib.metadata as m; print(m.version('torch'), m.version('cuda-toolkit'), '.'.join(map(str, torch.cuda.nccl.version())), m.version('nvidia-cudnn-cu13'))")
  fi
  echo "labels: $want"
  echo "inside: $have"
  read -r -a w <<<"$want"
  read -r -a h <<<"$have"
  [ "${#w[@]}" = "${#h[@]}" ] || die "smoke: labels and inside differ in shape"
  for i in "${!w[@]}"; do
    case "${h[$i]}" in "${w[$i]}"*) ;; *) die "smoke: inside '${h[$i]}' does not match label '${w[$i]}'" ;; esac
  done
  "$rt" run --rm "$ref" --dry-run -- python -m trainer.train --help >/dev/null
  have=$("$rt" run --rm --network none "$ref" --platform local --nproc-per-node 1 -- id -u 2>/dev/null | tail -n 1)
  have=${have#"[rank0] "}  # the launcher prefixes each worker line with its rank
  [ "$have" = 10001 ] || die "smoke: started as root, the launcher ran the job as uid '$have', not 10001"
  "$rt" run --rm --entrypoint python "$ref" -m trainer.train --help >/dev/null
  # shellcheck disable=SC2016  # expanded by the container's bash
  "$rt" run --rm --user 10001 --entrypoint bash "$ref" -c '
    set -euo pipefail
    test "$(id -u)" = 10001
    touch ./probe /opt/ml/model/probe /opt/ml/checkpoints/probe /opt/ml/output/probe
    command -v train
    ! command -v gcc
    ! command -v cc
    test "$NCCL_DEBUG" = WARN
    test -z "${NCCL_SOCKET_IFNAME:-}"' >/dev/null
  echo "smoke: ok ($ref)"
}

cmd=${1:-}
shift || true
case "$cmd" in
  build) build "$@" ;;
  smoke) smoke "$@" ;;
  ref)
    [ "${1:-}" != --flavor ] || set -- "${2:?}"
    reference "${1:-cuda}"
    ;;
  *) say "usage: scripts/image.sh build [--flavor cpu|cuda] [--image trainer|controller] [--tag REF] | smoke REF | ref [--flavor cpu|cuda]"; exit 2 ;;
esac
