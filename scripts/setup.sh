#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian machine with Python 3.11: a venv with torch 2.13.0 (CPU),
# trainctl (+dev extras) and the trainer, both editable, and the digits example data.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
STAMP="$VENV/.trainctl-setup"
want="$(cat pyproject.toml trainer_image/pyproject.toml | sha256sum | cut -c1-16)"

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# The side environments below are independent of each other and of the main venv's packages: they install
# while the main venv does (most of a pip install is waiting on downloads, unpacking and byte-compiling one
# file after another), and `wait` fails the set-up if any of them failed.

# The oracle for the SageMaker launcher tests: AWS's own sagemaker-training toolkit, installed beside the
# venv (--target, --no-deps: its environment code needs only boto3 and six, which the venv has; no `train`
# script lands on the venv's PATH). tests/sagemaker/test_toolkit_oracle.py runs it on fake /opt/ml trees.
sagemaker_training_oracle() {
  local version=5.1.4
  local dir="$VENV/oracle/sagemaker-training-$version"
  if [ ! -f "$dir/sagemaker_training/environment.py" ]; then
    rm -rf "$dir"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/pip" install -q --no-deps --target "$dir" "sagemaker-training==$version"
  fi
}

# A venv of its own for what cannot share the main one: side_venv DIR STAMP PIP-ARGUMENT... (installed again
# when its stamp changes)
side_venv() {
  local dir=$1 stamp=$2
  shift 2
  if [ "$(cat "$dir/.trainctl-setup" 2>/dev/null)" != "$stamp" ]; then
    [ -x "$dir/bin/python" ] || "$PY" -m venv "$dir"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$dir/bin/pip" install -q "$@"
    echo "$stamp" > "$dir/.trainctl-setup"
  fi
}

side=()
sagemaker_training_oracle & side+=($!)
# SageMaker Python SDK 3.x (ModelTrainer) cannot share a venv with 2.x (the estimator bridge the main venv
# tests): sagemaker-train and trainctl itself, used by tests/sagemaker/test_model_trainer.py.
side_venv "${SM3_VENV:-.venv-sm3}" "sagemaker-train==1.27.0 $want" "sagemaker-train==1.27.0" -e . & side+=($!)
# The Kubeflow SDK (kubeflow 0.5, TrainerClient) needs kubernetes<36, which the main venv's kubernetes 37
# cannot share: the client oracle of tests/kubernetes/test_kubeflow_sdk.py.
side_venv "${KF_VENV:-.venv-kubeflow}" "kubeflow==0.5.0 kubernetes<36" "kubeflow==0.5.0" "kubernetes<36" & side+=($!)
# A real MLflow tracking server for tests/sdk/test_tracking.py and tests/slurm/test_tracking.py (`mlflow server`,
# SQLite store): its server dependencies (Flask, SQLAlchemy, pandas...) stay out of the test venv and the image.
side_venv "${MLFLOW_VENV:-.venv-mlflow}" "mlflow==3.17.2" "mlflow==3.17.2" & side+=($!)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  export PIP_DISABLE_PIP_VERSION_CHECK=1
  # torch first and pinned: an open range would pull several GB of CUDA wheels.
  "$VENV/bin/pip" install -q "torch==2.13.0"
  "$VENV/bin/pip" install -q -e ".[dev]" -e "./trainer_image[examples,wandb]"
  echo "$want" > "$STAMP"
fi
if [ ! -s examples/data/digits/train.jsonl ]; then
  "$VENV/bin/python" -m trainer.examples.digits_data examples/data/digits & side+=($!)
fi
for pid in "${side[@]}"; do wait "$pid"; done
echo "setup: ok ($("$VENV/bin/python" -c 'import torch, trainctl; print("torch", torch.__version__, "trainctl", trainctl.__version__)'))"
