"""Job files the benchmarks drive trainctl with: a comparable 2-node x 2-process DDP job per target.

Each target has its own rules for where data lives (local paths, a shared filesystem, a PVC,
S3) and SageMaker wants an ECR image; everything else is the same job.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from .common import WORK

ECR_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainctl-trainer:0.1.0"


def job_dict(target: str, name: str = "bench-ddp", train: str | None = None) -> dict[str, Any]:
    """The benchmark's DDP job for `target` (local: 1 node, the machine has only one)."""
    job: dict[str, Any] = {
        "name": name,
        "trainer": {"model": "digits", "batch_size": 32, "epochs": 1, "lr": 0.003},
        "resources": {"nodes": 2, "procs_per_node": 2},
        "checkpoint": {"every_steps": 100, "keep": 2},
        "max_runtime": "30m",
    }
    data = {
        "local": train or str(WORK / "data" / "digits" / "train.jsonl"),
        "slurm": "/shared/datasets/digits/train.jsonl",
        "kubernetes": "pvc://datasets/digits/train.jsonl",
        "sagemaker": "s3://bench-bucket/digits/train.jsonl",
    }[target]
    job["data"] = {"train": data}
    if target == "local":
        job["resources"]["nodes"] = 1
    if target == "sagemaker":
        job["image"] = ECR_IMAGE
        job["sagemaker"] = {
            "role_arn": "arn:aws:iam::123456789012:role/trainctl-bench",
            "instance_type": "ml.c5.xlarge",
            "output_s3_uri": "s3://bench-bucket/output",
        }
    return job


def variant(target: str, i: int) -> dict[str, Any]:
    """The i-th of many distinct jobs: name, sizes, hyperparameters and env all vary with i."""
    job = copy.deepcopy(job_dict(target, name=f"bench-{i:05d}"))
    job["trainer"].update({"batch_size": 8 + i % 57, "lr": round(0.0005 * (1 + i % 13), 6), "epochs": 1 + i % 5,
                           "seed": i})  # fmt: skip
    job["resources"]["procs_per_node"] = 1 + i % 4
    if target != "local":
        job["resources"]["nodes"] = 1 + i % 8
    job["env"] = {"BENCH_INDEX": str(i), "LOGLEVEL": "INFO" if i % 2 else "WARNING"}
    job["checkpoint"]["every_steps"] = 50 + i % 200
    return job


def write_job(target: str, directory: Path | None = None) -> Path:
    directory = directory or WORK / "jobs"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{target}.yaml"
    path.write_text(yaml.safe_dump(job_dict(target), sort_keys=False))
    return path
