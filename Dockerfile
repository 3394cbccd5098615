# The trainctl trainer image: one pinned CUDA / cuDNN / NCCL / torch stack that every node of
# every target (local, SLURM, Kubernetes, SageMaker) runs, so nodes never disagree about them.
#
#   docker buildx build -t ghcr.io/trainctl/trainer:0.1.0 .      the cuda flavor (these defaults)
#   scripts/image.sh build --flavor cpu                            the cpu flavor (trainer_image/flavor-cpu.args)
#
# Two flavors, one file: `cuda` (the defaults below) and `cpu` (a Debian base made with mmdebstrap,
# Debian's Python, torch's CPU wheel). They differ only in the build arguments listed in
# trainer_image/flavor-cpu.args (base, Python, lock, versions); every stage, the user, the layout,
# the labels and the entrypoint are the same lines, and tests/image fails if that drifts.
#
# Every version is written once, here, as a build argument with a default, and echoed into the
# image labels. tests/image checks these defaults against trainer_image/requirements.lock (the
# hashed lock pip installs from), trainer_image/pyproject.toml and sdk/trainctl/version.py, and
# the build itself fails if an overridden argument disagrees with the lock. See docs/image.md.

# --- the pins -----------------------------------------------------------------------------------
# Which flavor these arguments describe (a label; the CUDA check below runs only for cuda).
ARG FLAVOR=cuda
# Base: NVIDIA's CUDA "base" image (CUDA runtime + forward-compat libraries, nothing else), by tag
# AND by the digest of its multi-arch index. torch's PyPI wheels bring their own CUDA libraries,
# cuDNN and NCCL as hashed nvidia-* wheels, so a cudnn-runtime base would only add a second copy.
# Refresh: docker buildx imagetools inspect nvidia/cuda:<CUDA_VER>-base-ubuntu<UBUNTU_VER>
ARG CUDA_VER=13.0.3
ARG UBUNTU_VER=24.04
ARG BASE_NAME=nvidia/cuda:${CUDA_VER}-base-ubuntu${UBUNTU_VER}
ARG BASE_DIGEST=sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1
# What torch 2.13.0 (PyPI, linux x86_64) pins: cuda-toolkit==13.0.3, nvidia-cudnn-cu13, nvidia-nccl-cu13.
ARG TORCH_VER=2.13.0
ARG CUDNN_VER=9.20.0.48
ARG NCCL_VER=2.29.7
# Ubuntu 24.04's python3; the lock is resolved for it.
ARG PYTHON_VER=3.12
# The hashed lock (in trainer_image/) pip installs from; the cpu flavor has its own.
ARG LOCK=requirements.lock
# The project version (sdk/trainctl/version.py); CI passes the git revision.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=https://github.com/trainctl/trainctl
# Fixed, non-root identity (Ubuntu's own "ubuntu" user already holds 1000).
ARG TRAINER_UID=10001

# --- base: the CUDA image plus the distribution's Python, shared by both stages -------------------
FROM ${BASE_NAME}@${BASE_DIGEST} AS base
ARG FLAVOR
ARG CUDA_VER
ARG PYTHON_VER
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG DEBIAN_FRONTEND=noninteractive
ENV LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# The tag and the digest must name the same CUDA: with both given, the digest wins silently, so
# a bumped CUDA_VER with a stale BASE_DIGEST would otherwise build the old image under new labels.
# A base that already has the packages (the cpu flavor's mmdebstrap base) needs no package index.
RUN case "${FLAVOR}:${CUDA_VERSION:-}" in \
      "cuda:${CUDA_VER}"*) ;; \
      cpu:) ;; \
      *) echo "flavor ${FLAVOR}: base image carries CUDA '${CUDA_VERSION:-}', CUDA_VER says '${CUDA_VER}': refresh BASE_DIGEST" >&2; exit 1 ;; \
    esac \
 && if ! dpkg-query -W "python${PYTHON_VER}" ca-certificates >/dev/null 2>&1; then \
      apt-get update \
      && apt-get install -y --no-install-recommends "python${PYTHON_VER}" ca-certificates \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && "python${PYTHON_VER}" --version

# --- builder: resolve nothing, install the hashed lock into /opt/venv (the dependencies) ---------
FROM base AS builder
ARG DEBIAN_FRONTEND=noninteractive
ARG FLAVOR
ARG PYTHON_VER
ARG TORCH_VER
ARG CUDNN_VER
ARG NCCL_VER
ARG LOCK
# Read by pip when a build passes them (scripts/image.sh, cpu flavor: the folder holding torch's CPU
# wheel and the host's CA bundle, both mounted read-only for the build only); unset otherwise.
ARG PIP_FIND_LINKS
ARG PIP_CERT
RUN if ! dpkg-query -W "python${PYTHON_VER}-venv" >/dev/null 2>&1; then \
      apt-get update \
      && apt-get install -y --no-install-recommends "python${PYTHON_VER}-venv" \
      && rm -rf /var/lib/apt/lists/*; \
    fi
COPY trainer_image/${LOCK} /tmp/lock/requirements.lock
COPY trainer_image/build-requirements.lock /tmp/lock/
# The lock must pin what the build arguments say (the labels repeat them). Then the runtime
# dependencies: exact versions, the sha256 of every file, wheels only, so no compiler is needed;
# the build backend (hatchling) goes into a throwaway venv, also from a hashed lock.
RUN grep -q "^torch==${TORCH_VER} " /tmp/lock/requirements.lock \
 && if [ "${FLAVOR}" = cuda ]; then \
      grep -q "^nvidia-cudnn-cu13==${CUDNN_VER} " /tmp/lock/requirements.lock \
      && grep -q "^nvidia-nccl-cu13==${NCCL_VER} " /tmp/lock/requirements.lock; \
    fi \
 && "python${PYTHON_VER}" -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --require-hashes --only-binary=:all: --no-deps \
      -r /tmp/lock/requirements.lock \
 && "python${PYTHON_VER}" -m venv /opt/build-venv \
 && /opt/build-venv/bin/pip install --no-cache-dir --require-hashes --only-binary=:all: --no-deps \
      -r /tmp/lock/build-requirements.lock
# And what pip installed is what the build arguments say.
RUN /opt/venv/bin/python -c "import sys; from importlib.metadata import version as v; \
pins = {'torch': '${TORCH_VER}'}; \
pins.update({'nvidia-cudnn-cu13': '${CUDNN_VER}', 'nvidia-nccl-cu13': '${NCCL_VER}'} if '${FLAVOR}' == 'cuda' else {}); \
bad = {n: (v(n), w) for n, w in pins.items() if v(n) != w}; \
sys.exit(f'installed != build argument: {bad}' if bad else 0)"

# --- trainer: the trainer's wheel, built in a stage of its own -------------------------------------
# The runtime copies the builder's /opt/venv (the dependencies, about 1.1 GB) and installs this wheel over
# it in a layer of its own: a change to the trainer rebuilds and pushes that small layer, and the venv's
# layer stays the one the registry and every node already have (tests/image/test_build.py checks it).
FROM builder AS trainer
COPY trainer_image/pyproject.toml /src/trainer_image/pyproject.toml
COPY trainer_image/trainer /src/trainer_image/trainer
RUN /opt/build-venv/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation \
      -w /tmp/wheels /src/trainer_image

# --- runtime: the CUDA base, Python, the venv; no compilers, no pip cache, the job never as root ---
FROM base AS runtime
ARG TRAINER_UID
# One user with a fixed UID; group 0 owns the writable paths too, so platforms that run the image
# under an arbitrary UID in group 0 (OpenShift) can still write. /opt/ml is SageMaker's layout.
RUN groupadd --gid "${TRAINER_UID}" trainer \
 && useradd --uid "${TRAINER_UID}" --gid "${TRAINER_UID}" --home-dir /home/trainer --create-home \
      --shell /bin/bash trainer \
 && install -d -o "${TRAINER_UID}" -g 0 -m 0775 /workspace /home/trainer \
      /opt/ml /opt/ml/code /opt/ml/model /opt/ml/checkpoints /opt/ml/output /opt/ml/output/data \
      /opt/ml/input /opt/ml/input/config /opt/ml/input/data
COPY --from=builder /opt/venv /opt/venv
COPY --from=trainer /tmp/wheels /tmp/wheels
COPY trainer_image/bin/train /tmp/train
# pip check: the lock satisfies the trainer's own requirements. SageMaker runs "train": it has to be an
# executable on PATH, whatever mode git checked it out with.
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps /tmp/wheels/*.whl \
 && /opt/venv/bin/pip check \
 && install -m 0755 /tmp/train /opt/venv/bin/train \
 && rm -rf /tmp/wheels /tmp/train
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH} \
    HOME=/home/trainer \
    PYTHONUNBUFFERED=1 \
    NCCL_DEBUG=WARN \
    TRAINCTL_TRAINER_UID=${TRAINER_UID}
# NCCL_SOCKET_IFNAME is deliberately unset: NCCL picks the interface; set it per cluster with -e.
# The collectives' flight recorder (TORCH_FR_BUFFER_SIZE, TORCH_NCCL_DUMP_ON_TIMEOUT, dumps in the run's
# output folder) is turned on by trainer-launch for every worker, on any target, image or not
# (trainer/launcher/flight_recorder.py FLIGHT_RECORDER_ENV): the dump folder is the run's, which only the launcher knows.
# One image for every target, so the image starts as root: SageMaker cannot pass a user and mounts
# /opt/ml as root. Started as root, trainer-launch (ENTRYPOINT, and `train`) hands /opt/ml to
# TRAINCTL_TRAINER_UID and drops to it before anything of the job runs (trainer/launcher/privileges.py).
# Every other target passes that user itself (--user 10001, runAsUser: 10001, read-only root).
# hadolint ignore=DL3002
USER 0:0
WORKDIR /workspace
# The labels last: a new revision relabels the image without rebuilding a layer above.
ARG FLAVOR
ARG TRAINER_UID
ARG BASE_NAME
ARG CUDA_VER
ARG BASE_DIGEST
ARG TORCH_VER
ARG CUDNN_VER
ARG NCCL_VER
ARG PYTHON_VER
ARG VERSION
ARG REVISION
ARG SOURCE
LABEL org.opencontainers.image.title="trainctl trainer" \
      org.opencontainers.image.description="trainctl's trainer: platform-aware torchrun launcher and DDP/FSDP loop" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_NAME}" \
      org.opencontainers.image.base.digest="${BASE_DIGEST}" \
      io.trainctl.flavor="${FLAVOR}" \
      io.trainctl.trainer.uid="${TRAINER_UID}" \
      io.trainctl.cuda.version="${CUDA_VER}" \
      io.trainctl.cudnn.version="${CUDNN_VER}" \
      io.trainctl.nccl.version="${NCCL_VER}" \
      io.trainctl.torch.version="${TORCH_VER}" \
      io.trainctl.python.version="${PYTHON_VER}"
ENTRYPOINT ["trainer-launch"]
CMD ["--help"]
