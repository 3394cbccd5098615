# trainctl-controller: trainctl's retries of Kubernetes runs, from inside the cluster
# (k8s/controller.yaml; sdk/trainctl/targets/kubernetes/controller.py). The SDK with its `kubernetes`
# extra on Debian's Python: no torch, no CUDA, no compiler.
#
#   scripts/image.sh build --image controller      builds it (from the Debian base the cpu trainer uses)
#
# Its build context is only what it installs (pyproject.toml, README.md, sdk/): scripts/image.sh
# copies those into a folder of their own, so the trainer's allow-list .dockerignore stays as it is.
ARG BASE_NAME=debian:bookworm-slim
FROM ${BASE_NAME}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CONTROLLER_UID=10001
ENV LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# A base that already has Python (the mmdebstrap base scripts/image.sh makes) needs no package index.
RUN if ! command -v python3.11 >/dev/null; then \
      apt-get update && apt-get install -y --no-install-recommends python3.11 python3.11-venv ca-certificates \
      && rm -rf /var/lib/apt/lists/*; \
    fi
COPY pyproject.toml README.md /src/
COPY sdk /src/sdk
# PIP_CERT: a CA bundle mounted at build time (registries behind a TLS-intercepting proxy); unset: the image's.
ARG PIP_CERT=
RUN python3.11 -m venv /opt/controller \
    && PIP_CERT="${PIP_CERT}" /opt/controller/bin/pip install --no-cache-dir "/src[kubernetes]" \
    && /opt/controller/bin/pip uninstall -y pip setuptools \
    && rm -rf /src \
    && useradd --uid "${CONTROLLER_UID}" --no-create-home --shell /usr/sbin/nologin controller
USER ${CONTROLLER_UID}:${CONTROLLER_UID}
ENV PATH=/opt/controller/bin:/usr/local/bin:/usr/bin:/bin
LABEL org.opencontainers.image.title="trainctl-controller" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
ENTRYPOINT ["trainctl-controller"]
