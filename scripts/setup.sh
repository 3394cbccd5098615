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
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  export PIP_DISABLE_PIP_VERSION_CHECK=1
  # torch first and pinned: an open range would pull several GB of CUDA wheels.
  "$VENV/bin/pip" install -q "torch==2.13.0"
  "$VENV/bin/pip" install -q -e ".[dev]" -e "./trainer_image[examples,wandb]"
  echo "$want" > "$STAMP"
fi
# The oracle for the SageMaker launcher tests: AWS's own sagemaker-training toolkit, installed beside the
# venv (--target, --no-deps: its environment code needs only boto3 and six, which the venv has; no `train`
# script lands on the venv's PATH). tests/sagemaker/test_toolkit_oracle.py runs it on fake /opt/ml trees.
SMT_VERSION=5.1.4
SMT_DIR="$VENV/oracle/sagemaker-training-$SMT_VERSION"
if [ ! -f "$SMT_DIR/sagemaker_training/environment.py" ]; then
  rm -rf "$SMT_DIR"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/pip" install -q --no-deps --target "$SMT_DIR" "sagemaker-training==$SMT_VERSION"
fi
# SageMaker Python SDK 3.x (ModelTrainer) cannot share a venv with 2.x (the estimator bridge the main venv
# tests): a second, small venv with sagemaker-train and trainctl itself, used by tests/sagemaker/test_model_trainer.py.
SM3_VENV=${SM3_VENV:-.venv-sm3}
SM3_WANT="sagemaker-train==1.27.0 $want"
if [ "$(cat "$SM3_VENV/.trainctl-setup" 2>/dev/null)" != "$SM3_WANT" ]; then
  [ -x "$SM3_VENV/bin/python" ] || "$PY" -m venv "$SM3_VENV"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$SM3_VENV/bin/pip" install -q "sagemaker-train==1.27.0" -e .
  echo "$SM3_WANT" > "$SM3_VENV/.trainctl-setup"
fi
# The Kubeflow SDK (kubeflow 0.5, TrainerClient) needs kubernetes<36, which the main venv's kubernetes 37
# cannot share: a small venv of its own, the client oracle of tests/kubernetes/test_kubeflow_sdk.py.
KF_VENV=${KF_VENV:-.venv-kubeflow}
KF_WANT="kubeflow==0.5.0 kubernetes<36"
if [ "$(cat "$KF_VENV/.trainctl-setup" 2>/dev/null)" != "$KF_WANT" ]; then
  [ -x "$KF_VENV/bin/python" ] || "$PY" -m venv "$KF_VENV"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$KF_VENV/bin/pip" install -q "kubeflow==0.5.0" "kubernetes<36"
  echo "$KF_WANT" > "$KF_VENV/.trainctl-setup"
fi
# A real MLflow tracking server for tests/sdk/test_tracking.py and tests/slurm/test_tracking.py (`mlflow server`,
# SQLite store): its server dependencies (Flask, SQLAlchemy, pandas...) stay out of the test venv and the image.
MLFLOW_VENV=${MLFLOW_VENV:-.venv-mlflow}
MLFLOW_WANT="mlflow==3.17.2"
if [ "$(cat "$MLFLOW_VENV/.trainctl-setup" 2>/dev/null)" != "$MLFLOW_WANT" ]; then
  [ -x "$MLFLOW_VENV/bin/python" ] || "$PY" -m venv "$MLFLOW_VENV"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$MLFLOW_VENV/bin/pip" install -q "$MLFLOW_WANT"
  echo "$MLFLOW_WANT" > "$MLFLOW_VENV/.trainctl-setup"
fi
if [ ! -s examples/data/digits/train.jsonl ]; then
  "$VENV/bin/python" -m trainer.examples.digits_data examples/data/digits
fi
echo "setup: ok ($("$VENV/bin/python" -c 'import torch, trainctl; print("torch", torch.__version__, "trainctl", trainctl.__version__)'))"
