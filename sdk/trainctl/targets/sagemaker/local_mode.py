"""trainctl's own SageMaker local mode: a rendered CreateTrainingJob request run as containers here.

Engine-side I/O only. What a SageMaker host does before `train`, ported from the SageMaker SDK's local mode
(sagemaker/local/image.py: `_SageMakerContainer.train` writes resourceconfig.json, hyperparameters.json
and inputdataconfig.json per host, `_prepare_training_volumes` fetches each channel, `retrieve_artifacts`
merges every host's /opt/ml/model and /opt/ml/output/data into model.tar.gz and output.tar.gz): N
containers `algo-1..N` on one container network, /opt/ml bind-mounted, entry `train`, no user given, as on
SageMaker: trainctl's image starts as root and its launcher hands /opt/ml to uid 10001 and drops to it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import EngineError


@dataclass(frozen=True)
class LocalResult:
    """What the run left: one exit code and log per host, the archives, the failure line if any."""

    exit_codes: dict[str, int]
    logs: dict[str, str]
    model_tar: Path
    output_tar: Path
    failure: str | None


def _fetch_channel(uri: str, dest: Path, s3: Any) -> None:
    """Every object under an S3Prefix (or the one object it names) into `dest`; a local path is copied."""
    dest.mkdir(parents=True, exist_ok=True)
    if not uri.startswith("s3://"):
        src = Path(uri)
        if src.is_dir():
            shutil.copytree(src, dest, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dest / src.name)
        return
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    for page in pages:
        for obj in page.get("Contents", []):
            key = obj["Key"]
            rel = key[len(prefix) :].lstrip("/") or Path(key).name
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, key, str(target))


def _host_tree(root: Path, request: dict[str, Any], host: str, hosts: list[str], channels: Path) -> Path:
    """/opt/ml for one host, as the SDK's `_SageMakerContainer.train` lays it out."""
    ml = root / host
    config = ml / "input" / "config"
    config.mkdir(parents=True)
    for sub in ("model", "output/data", "checkpoints", "code"):
        (ml / sub).mkdir(parents=True, exist_ok=True)
    resource = {
        "current_host": host,
        "hosts": hosts,
        "current_group_name": "homogeneousCluster",
        "current_instance_type": request["ResourceConfig"]["InstanceType"],
        "instance_groups": [
            {
                "instance_group_name": "homogeneousCluster",
                "instance_type": request["ResourceConfig"]["InstanceType"],
                "hosts": hosts,
            }
        ],
        "network_interface_name": "eth0",
    }
    mode = request["AlgorithmSpecification"].get("TrainingInputMode", "File")
    input_config = {
        c["ChannelName"]: {
            "TrainingInputMode": c.get("InputMode", mode),
            "S3DistributionType": c["DataSource"]["S3DataSource"].get("S3DataDistributionType", "FullyReplicated"),
            "RecordWrapperType": c.get("RecordWrapperType", "None"),
        }
        for c in request.get("InputDataConfig", [])
    }
    (config / "resourceconfig.json").write_text(json.dumps(resource))
    (config / "hyperparameters.json").write_text(json.dumps(request.get("HyperParameters", {})))
    (config / "inputdataconfig.json").write_text(json.dumps(input_config))
    shutil.copytree(channels, ml / "input" / "data")
    return ml


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _archive(sources: list[Path], dest: Path) -> Path:
    """Every host's folder merged into one tar.gz (the SDK's `retrieve_artifacts`: later hosts win)."""
    merged = dest.with_suffix("").with_suffix("")
    merged.mkdir(parents=True, exist_ok=True)
    for src in sources:
        if src.is_dir():
            shutil.copytree(src, merged, dirs_exist_ok=True)
    with tarfile.open(dest, "w:gz") as tar:
        for item in sorted(merged.iterdir()):
            tar.add(item, arcname=item.name)
    return dest


def run_local(
    request: dict[str, Any],
    *,
    image: str,
    root: Path,
    runtime: str = "podman",
    s3: Any = None,
    timeout_s: float = 3600,
) -> LocalResult:
    """Run `request` (a rendered CreateTrainingJob) as InstanceCount containers; blocks until all exit."""
    if shutil.which(runtime) is None:
        raise EngineError(f"{runtime} is not installed", hint="run scripts/setup-containers.sh")
    found = (
        _run([runtime, "image", "exists", image]) if runtime == "podman" else _run([runtime, "image", "inspect", image])
    )
    if found.returncode != 0:
        raise EngineError(
            f"image {image} is not in {runtime}'s local store", hint="scripts/image.sh build --flavor cpu"
        )
    hosts = [f"algo-{i}" for i in range(1, int(request["ResourceConfig"]["InstanceCount"]) + 1)]
    channels = root / "channels"
    channels.mkdir(parents=True)
    for channel in request.get("InputDataConfig", []):
        if s3 is None:
            import boto3

            s3 = boto3.client("s3")
        _fetch_channel(channel["DataSource"]["S3DataSource"]["S3Uri"], channels / channel["ChannelName"], s3)
    trees = {host: _host_tree(root, request, host, hosts, channels) for host in hosts}
    token = uuid.uuid4().hex[:8]
    network = f"trainctl-sm-{token}"
    made = _run([runtime, "network", "create", network])
    if made.returncode != 0:
        raise EngineError(f"{runtime} network create {network}: {made.stderr.strip()}")
    algo = request["AlgorithmSpecification"]
    entry = algo.get("ContainerEntrypoint", ["train"])
    env = [f"--env={k}={v}" for k, v in sorted(request.get("Environment", {}).items())]
    names = {host: f"{token}-{host}" for host in hosts}
    try:
        for host in hosts:
            started = _run(
                [runtime, "run", "-d", "--name", names[host], "--hostname", host, "--network", network,
                 "--network-alias", host, "-v", f"{trees[host]}:/opt/ml", *env, "--entrypoint", entry[0],
                 image, *entry[1:], *algo.get("ContainerArguments", [])]
            )  # fmt: skip
            if started.returncode != 0:
                raise EngineError(f"{runtime} could not start {host}: {started.stderr.strip()}")
        codes: dict[str, int] = {}
        logs: dict[str, str] = {}
        for host in hosts:
            waited = subprocess.run(
                [runtime, "wait", names[host]], capture_output=True, text=True, timeout=timeout_s, check=False
            )
            codes[host] = int(waited.stdout.strip().splitlines()[-1]) if waited.returncode == 0 else -1
            got = _run([runtime, "logs", names[host]])
            logs[host] = got.stdout + got.stderr
    finally:
        _run([runtime, "rm", "-f", *names.values()])
        _run([runtime, "network", "rm", network])
    failure_files = [trees[h] / "output" / "failure" for h in hosts if (trees[h] / "output" / "failure").exists()]
    failure = failure_files[0].read_text().strip() if failure_files else None
    model_tar = _archive([trees[h] / "model" for h in hosts], root / "artifacts" / "model.tar.gz")
    output_tar = _archive([trees[h] / "output" / "data" for h in hosts], root / "artifacts" / "output.tar.gz")
    return LocalResult(codes, logs, model_tar, output_tar, failure)
