#!/usr/bin/env bash
# The whole test suite: set up, then pytest (the SLURM and Kubernetes fixtures start their own
# local cluster / API server; see README "What cannot be tested here").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# podman (runc), mmdebstrap, docker-compose: the trainer image is built and run by the tests.
bash scripts/setup-containers.sh
# pytest-xdist: TRAINCTL_TEST_WORKERS workers (3 by default: most tests wait on subprocesses, the SLURM cluster,
# the API server or podman, so 3 beat 2 on CI's 2 cores); `--dist loadgroup` keeps each shared cluster's tests on
# one worker (tests/conftest.py XDIST_GROUPS). TRAINCTL_TEST_WORKERS=0 runs the suite in this one process.
workers=${TRAINCTL_TEST_WORKERS:-3}
# Python's own default, byte-code written on first import: an environment that turns it off (some sandboxes set
# PYTHONDONTWRITEBYTECODE) makes each pytest worker rewrite and compile every test module at collection (about
# 10 CPU-s each) and each `trainctl` process compile the SDK again (about 0.12 s each, hundreds in a run).
unset PYTHONDONTWRITEBYTECODE
if [ "$workers" = 0 ]; then
  exec .venv/bin/pytest "$@"
fi
exec .venv/bin/pytest -n "$workers" --dist loadgroup "$@"
