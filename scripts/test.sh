#!/usr/bin/env bash
# The whole test suite: set up, then pytest (the SLURM and Kubernetes fixtures start their own
# local cluster / API server; see README "What cannot be tested here").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# podman (runc), mmdebstrap, docker-compose: the trainer image is built and run by the tests.
bash scripts/setup-containers.sh
exec .venv/bin/pytest "$@"
