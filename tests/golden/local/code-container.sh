#!/bin/sh
# trainctl local run of job 'code-container': 1 node x 2 process(es), gloo backend.
# `trainctl submit --target local` runs this in a detached process group with
# TRAINCTL_RUN_DIR set to the run's folder ($TRAINCTL_HOME/runs/<id>) and the log in log.txt there.
set -eu
: "${TRAINCTL_RUN_DIR:?set TRAINCTL_RUN_DIR to a folder for this run}"
# code: /JOB_DIR/code-src -> ${TRAINCTL_RUN_DIR}/code.tar.gz, sha256 0d774276995519651f65af9bf142031545f53315d3278a2de77a91951e00d604
# (submit writes the bundle there; mounted read-only at /workspace/code.tar.gz, the launcher
# verifies it and unpacks it into code/src/, /workspace/code/src in the container)
mkdir -p "${TRAINCTL_RUN_DIR}/work"
cd "${TRAINCTL_RUN_DIR}/work"
export GREETING=hi
export OMP_NUM_THREADS=1
export PYTHONUNBUFFERED=1
export TRAINCTL_PROVENANCE='{"code_sha256":"0d774276995519651f65af9bf142031545f53315d3278a2de77a91951e00d604","image":"localhost/trainctl-trainer:0.1.0-cpu","image_digest":null,"spec_sha256":"4cdfc660aff93c464025f4436c934ac4ef931ad745e474a73058a34c3646f5ea","trainctl_version":"0.1.0"}'
export TRAINER_CHECKPOINT_DIR=/workspace/checkpoints
export TRAINER_CODE_BUNDLE=/workspace/code.tar.gz
export TRAINER_CODE_DIR=/workspace/code/src
export TRAINER_CODE_SHA256=0d774276995519651f65af9bf142031545f53315d3278a2de77a91951e00d604
export TRAINER_OUTPUT_DIR=/workspace/output
: "${TRAINCTL_RUN_ID:=$(basename "$TRAINCTL_RUN_DIR")}"
mkdir -p "${TRAINCTL_RUN_DIR}/output" "${TRAINCTL_RUN_DIR}/checkpoints" "${TRAINCTL_RUN_DIR}/work" "${TRAINCTL_RUN_DIR}/code"
# podman runs the image as user 10001: these folders must be writable by it.
# The words after the image are options of its ENTRYPOINT, trainer-launch.
exec podman run \
  --name "trainctl-${TRAINCTL_RUN_ID}" \
  --label "io.trainctl.run=${TRAINCTL_RUN_ID}" \
  --user 10001:10001 \
  --read-only \
  --network host \
  --shm-size 1g \
  --pull never \
  --tmpfs /tmp:rw,mode=1777 \
  --workdir /workspace/work \
  --volume "${TRAINCTL_RUN_DIR}/code.tar.gz:/workspace/code.tar.gz:ro" \
  --volume "${TRAINCTL_RUN_DIR}/output:/workspace/output" \
  --volume "${TRAINCTL_RUN_DIR}/checkpoints:/workspace/checkpoints" \
  --volume "${TRAINCTL_RUN_DIR}/work:/workspace/work" \
  --volume "${TRAINCTL_RUN_DIR}/code:/workspace/code" \
  --env GREETING \
  --env OMP_NUM_THREADS \
  --env PYTHONUNBUFFERED \
  --env TRAINCTL_PROVENANCE \
  --env TRAINER_CHECKPOINT_DIR \
  --env TRAINER_CODE_BUNDLE \
  --env TRAINER_CODE_DIR \
  --env TRAINER_CODE_SHA256 \
  --env TRAINER_OUTPUT_DIR \
  localhost/trainctl-trainer:0.1.0-cpu --platform local --nproc-per-node 2 --max-restarts 0 -- \
  python train.py --steps 5
