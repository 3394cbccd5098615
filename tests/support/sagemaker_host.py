"""What a SageMaker container does with a request, minus the container: SageMaker's files under a root, the code
channel, the image's `train` script run with the request's Environment (tests/sagemaker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_image(request: dict[str, Any], root: Path, code: bytes) -> subprocess.CompletedProcess[str]:
    """What the container does: SageMaker's files under `root`, the code channel, the image's `train` script."""
    config = root / "opt/ml/input/config"
    config.mkdir(parents=True)
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]}))
    (config / "hyperparameters.json").write_text(json.dumps(request["HyperParameters"]))
    channels = {c["ChannelName"]: {"S3DistributionType": "FullyReplicated"} for c in request["InputDataConfig"]}
    (config / "inputdataconfig.json").write_text(json.dumps(channels))
    (root / "opt/ml/input/data/code").mkdir(parents=True)
    (root / "opt/ml/input/data/code/sourcedir.tar.gz").write_bytes(code)
    bin_dir = Path(sys.executable).parent
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PET_", "TORCHELASTIC"))},
        **request["Environment"],
        "TRAINER_SAGEMAKER_ROOT": str(root),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    argv = ["sh", str(REPO / "trainer_image/bin/train"), *request["AlgorithmSpecification"]["ContainerArguments"]]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180, cwd=root)
