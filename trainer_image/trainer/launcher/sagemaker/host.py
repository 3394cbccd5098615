"""What the toolkit asks the machine before it computes SageMaker's environment (I/O, so not in platforms).

Ported from aws/sagemaker-training-toolkit src/sagemaker_training/environment.py: `num_gpus`
(`nvidia-smi --list-gpus`, lines starting "GPU "), `num_cpus` (`multiprocessing.cpu_count()`),
`num_neurons` (`neuron-ls -j`, the sum of `nc_count`), `validate_smddprun`/`validate_smddpmprun`
(`which`), and the region from `boto3.session.Session().region_name`.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import subprocess

from .toolkit_env import HostFacts


def num_gpus() -> int:
    try:
        out = subprocess.check_output(["nvidia-smi", "--list-gpus"], timeout=60).decode("utf-8")
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.split("\n") if line.startswith("GPU "))


def num_neurons() -> int:
    try:
        out = subprocess.check_output(["neuron-ls", "-j"], timeout=60).decode("utf-8")
        return sum(int(item.get("nc_count", 0)) for item in json.loads(out))
    except (OSError, subprocess.SubprocessError, ValueError, TypeError, AttributeError):
        return 0


def boto3_region() -> str | None:
    try:
        import boto3

        region = boto3.session.Session().region_name
        return str(region) if region else None
    except Exception:  # no boto3, or a broken AWS config: the toolkit would fail; we leave it empty
        return None


def probe() -> HostFacts:
    return HostFacts(
        num_gpus=num_gpus(),
        num_cpus=multiprocessing.cpu_count(),
        num_neurons=num_neurons(),
        smddprun=shutil.which("smddprun") is not None,
        smddpmprun=shutil.which("smddpmprun") is not None,
        region=boto3_region(),
    )
