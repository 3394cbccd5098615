"""trainctl's own SageMaker local mode: a rendered CreateTrainingJob request run as containers here.

Engine-side I/O only. What a SageMaker host does before `train`, ported from the SageMaker SDK's local mode
(sagemaker/local/image.py: `_SageMakerContainer.train` writes resourceconfig.json, hyperparameters.json
and inputdataconfig.json per host, `_prepare_training_volumes` fetches each channel, `retrieve_artifacts`
merges every host's /opt/ml/model and /opt/ml/output/data into model.tar.gz and output.tar.gz): N
containers `algo-1..N` on one container network, /opt/ml bind-mounted, entry `train`, no user given, as on
SageMaker: trainctl's image starts as root and its launcher hands /opt/ml to uid 10001 and drops to it.

In steps, so that `run_local` (blocking) and a detached run (local_engine.py submits, local_supervisor.py
waits) share them: `image_id` checks, `prepare` lays out /opt/ml per host, `create` makes the network
and the containers, `start`, `host_states`, `remove`, and `collect` merges the archives.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import uuid
from dataclasses import asdict, dataclass
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


@dataclass(frozen=True)
class Cluster:
    """One local run's containers: saved as RUN_DIR/cluster.json, so another process can wait for or stop them."""

    runtime: str
    image: str
    root: str  # algo-N/ (each host's /opt/ml), channels/, artifacts/
    network: str
    hosts: list[str]
    names: dict[str, str]  # host -> container name
    max_runtime_s: int

    def tree(self, host: str) -> Path:
        return Path(self.root) / host

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> Cluster:
        return cls(**json.loads(path.read_text()))


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


def _distribution(source: dict[str, Any]) -> str:
    """The channel's distribution, S3's or a file channel's (SDK 2 sagemaker/local/entities.py
    `_LocalTrainingJob.start` reads S3DataDistributionType or FileDataDistributionType the same way)."""
    found = source.get("S3DataSource") or {}
    files = source.get("FileDataSource") or {}
    return str(found.get("S3DataDistributionType") or files.get("FileDataDistributionType") or "FullyReplicated")


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
            "S3DistributionType": _distribution(c["DataSource"]),
            "RecordWrapperType": c.get("RecordWrapperType", "None"),
        }
        for c in request.get("InputDataConfig", [])
    }
    (config / "resourceconfig.json").write_text(json.dumps(resource))
    (config / "hyperparameters.json").write_text(json.dumps(request.get("HyperParameters", {})))
    (config / "inputdataconfig.json").write_text(json.dumps(input_config))
    shutil.copytree(channels, ml / "input" / "data")
    return ml


def _run(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)


def _words(done: subprocess.CompletedProcess[str]) -> str:
    return (done.stderr or done.stdout).strip()


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


def image_id(runtime: str, image: str) -> str:
    """The image's ID in the runtime's local store, or EngineError (exit 1) with the runtime's words."""
    if shutil.which(runtime) is None:
        raise EngineError(f"{runtime} is not installed (not on PATH)", hint="run scripts/setup-containers.sh")
    found = _run([runtime, "image", "inspect", image, "--format", "{{.Id}}"])
    if found.returncode != 0:
        raise EngineError(
            f"image {image} is not in {runtime}'s local store: {_words(found)}",
            hint="build it: scripts/image.sh build --flavor cpu (and use its reference as the job's image)",
        )
    return found.stdout.strip()


def prepare(
    request: dict[str, Any],
    *,
    image: str,
    root: Path,
    runtime: str = "podman",
    s3: Any = None,
    code: bytes | None = None,
) -> Cluster:
    """Fetch the channels and write every host's /opt/ml under `root`; nothing runs yet.

    `code`: the job's bundle, put straight into the `code` channel instead of fetched from S3."""
    from .request import CODE_CHANNEL, CODE_TARBALL

    if "InstanceCount" not in request["ResourceConfig"]:
        raise EngineError(
            "local mode runs one homogeneous cluster; this request has sagemaker.instance_groups",
            hint="submit it to AWS, or drop instance_groups to try it here",
        )
    hosts = [f"algo-{i}" for i in range(1, int(request["ResourceConfig"]["InstanceCount"]) + 1)]
    channels = root / "channels"
    channels.mkdir(parents=True)
    for channel in request.get("InputDataConfig", []):
        name = channel["ChannelName"]
        if name == CODE_CHANNEL and code is not None:
            (channels / name).mkdir()
            (channels / name / CODE_TARBALL).write_bytes(code)
            continue
        source = channel["DataSource"]
        if "FileDataSource" in source:  # a path here (local mode only), as the SDK's local mode reads one
            _fetch_channel(source["FileDataSource"]["FileUri"].removeprefix("file://"), channels / name, None)
            continue
        if s3 is None:
            import boto3

            s3 = boto3.client("s3")
        _fetch_channel(source["S3DataSource"]["S3Uri"], channels / name, s3)
    for host in hosts:
        _host_tree(root, request, host, hosts, channels)
    checkpoints = (request.get("CheckpointConfig") or {}).get("S3Uri")
    if checkpoints:  # as SageMaker does before the container starts: the prefix into /opt/ml/checkpoints
        if s3 is None:
            import boto3

            s3 = boto3.client("s3")
        for host in hosts:
            _fetch_channel(checkpoints, root / host / "checkpoints", s3)
    token = uuid.uuid4().hex[:8]
    return Cluster(
        runtime=runtime,
        image=image,
        root=str(root),
        network=f"trainctl-sm-{token}",
        hosts=hosts,
        names={host: f"{token}-{host}" for host in hosts},
        max_runtime_s=int(request.get("StoppingCondition", {}).get("MaxRuntimeInSeconds", 0)),
    )


def create(cluster: Cluster, request: dict[str, Any]) -> dict[str, str]:
    """The network and one created (not started) container per host; returns each one's image ID.

    A container the runtime cannot create: EngineError with its words, and nothing left behind."""
    runtime = cluster.runtime
    made = _run([runtime, "network", "create", cluster.network])
    if made.returncode != 0:
        raise EngineError(f"{runtime} network create {cluster.network}: {_words(made)}")
    algo = request["AlgorithmSpecification"]
    entry = algo.get("ContainerEntrypoint", ["train"])
    env = [f"--env={k}={v}" for k, v in sorted(request.get("Environment", {}).items())]
    for host in cluster.hosts:
        created = _run(
            [runtime, "create", "--name", cluster.names[host], "--hostname", host, "--network", cluster.network,
             "--network-alias", host, "-v", f"{cluster.tree(host)}:/opt/ml", *env, "--entrypoint", entry[0],
             cluster.image, *entry[1:], *algo.get("ContainerArguments", [])]
        )  # fmt: skip
        if created.returncode != 0:
            remove(cluster)
            raise EngineError(
                f"{runtime} could not create the container of {host}: {_words(created)}",
                hint="fix what the runtime names; nothing was started",
            )
    ids = {}
    for host, name in cluster.names.items():
        ids[host] = _run([runtime, "container", "inspect", name, "--format", "{{.Image}}"]).stdout.strip()
    return ids


def start(cluster: Cluster) -> None:
    for host in cluster.hosts:
        started = _run([cluster.runtime, "start", cluster.names[host]])
        if started.returncode != 0:
            raise EngineError(f"{cluster.runtime} could not start {host}: {_words(started)}")


# The container states of a host whose `train` has not ended: podman's (libpod/define/containerstate.go
# `ContainerStatus.String`) and Docker's (container/state.go `StateString`: paused and restarting still run).
ALIVE = ("running", "stopping", "paused", "restarting")


def host_states(cluster: Cluster) -> dict[str, tuple[str, int | None]]:
    """Each host's container state (`created`, `running`, `exited`, ...; `gone` once removed) and its exit code
    once it has exited."""
    return {host: _host_state(cluster, host) for host in cluster.hosts}


def _host_state(cluster: Cluster, host: str) -> tuple[str, int | None]:
    got = _run(
        [
            cluster.runtime,
            "container",
            "inspect",
            cluster.names[host],
            "--format",
            "{{.State.Status}} {{.State.ExitCode}}",
        ]
    )
    if got.returncode != 0:
        return "gone", None
    state, _, code = got.stdout.strip().partition(" ")
    return state, int(code) if state in ("exited", "stopped") else None


def signal_all(cluster: Cluster, signal_name: str = "TERM") -> None:
    """What StopTrainingJob does to each host: SIGTERM to the container's main process (`train`)."""
    for name in cluster.names.values():
        _run([cluster.runtime, "kill", "--signal", signal_name, name])


def remove(cluster: Cluster) -> None:
    _run([cluster.runtime, "rm", "--force", *cluster.names.values()])
    _run([cluster.runtime, "network", "rm", cluster.network])


def collect(cluster: Cluster) -> tuple[str | None, Path, Path]:
    """(the first host's failure line, model.tar.gz, output.tar.gz), the merged folders beside them."""
    trees = [cluster.tree(h) for h in cluster.hosts]
    artifacts = Path(cluster.root) / "artifacts"
    model_tar = _archive([t / "model" for t in trees], artifacts / "model.tar.gz")
    output_tar = _archive([t / "output" / "data" for t in trees], artifacts / "output.tar.gz")
    return failure(cluster), model_tar, output_tar


def failure(cluster: Cluster) -> str | None:
    """The first host's /opt/ml/output/failure, which SageMaker reports as the job's FailureReason."""
    found = [f for f in (cluster.tree(h) / "output" / "failure" for h in cluster.hosts) if f.exists()]
    return found[0].read_text().strip() if found else None


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
    image_id(runtime, image)
    cluster = prepare(request, image=image, root=root, runtime=runtime, s3=s3)
    create(cluster, request)
    codes: dict[str, int] = {}
    logs: dict[str, str] = {}
    try:
        start(cluster)
        for host, name in cluster.names.items():
            waited = _run([runtime, "wait", name], timeout=timeout_s)
            codes[host] = int(waited.stdout.strip().splitlines()[-1]) if waited.returncode == 0 else -1
            got = _run([runtime, "logs", name])
            logs[host] = got.stdout + got.stderr
    finally:
        remove(cluster)
    failure, model_tar, output_tar = collect(cluster)
    return LocalResult(codes, logs, model_tar, output_tar, failure)
