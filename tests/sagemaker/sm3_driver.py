"""Run in .venv-sm3 (SageMaker SDK 3.x) by the tests: build, submit, or train locally a job's ModelTrainer.

`python sm3_driver.py JOB.yaml build|submit` prints one JSON line: the trainer's class and SDK version, and
for `submit` the CreateTrainingJob parameters as the SDK passed them (botocore's provide-client-params hook)
and where the code tarball was uploaded (test_model_trainer.py).
`python sm3_driver.py JOB.yaml local IMAGE ROOT` trains the job in the SDK's local container mode
(`Mode.LOCAL_CONTAINER`, image IMAGE, `local_container_root` ROOT) and waits; its JSON adds the JSON files
found in the archives the SDK made (ROOT/compressed_artifacts: the trainer's summary.json), the image the
SDK's compose file names and the image IDs of the containers compose ran (test_sdk3_local_mode.py).
A socket guard refuses and records every resolve or connect to a host other than 127.0.0.1 (the SDK
swallows telemetry errors, so the attempt itself is what counts).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tarfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

ALLOWED = {"127.0.0.1", "localhost"}
violations: list[str] = []
_connect, _getaddrinfo = socket.socket.connect, socket.getaddrinfo


def _check(what: str, host: Any) -> None:
    host = host.decode() if isinstance(host, bytes) else host
    if host not in ALLOWED:
        violations.append(f"{what} {host!r}")
        raise OSError(f"sm3 socket guard: {what} {host!r} refused")


def _guarded_connect(self: socket.socket, address: Any) -> Any:
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _check("connect to", address[0])
    return _connect(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host is not None:
        _check("resolve", host)
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
socket.getaddrinfo = _guarded_getaddrinfo


def _archived(root: Path) -> dict[str, Any]:
    """Every JSON file in model.tar.gz / output.tar.gz, which `_LocalContainer.retrieve_artifacts` wrote."""
    found: dict[str, Any] = {}
    for archive in sorted((root / "compressed_artifacts").glob("*.tar.gz")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                f = tar.extractfile(member) if member.name.endswith(".json") else None
                found[f"{archive.name}:{member.name}"] = json.loads(f.read()) if f else None
    return found


def _ran(root: Path) -> dict[str, Any]:
    """The image the SDK's compose file names, and what compose's own containers of that project ran."""
    import yaml
    from sagemaker.train.local.local_container import DOCKER_COMPOSE_FILENAME, _LocalContainer

    compose_file = root / DOCKER_COMPOSE_FILENAME
    services = yaml.safe_load(compose_file.read_text())["services"]
    # The compose command the SDK picks (`_get_compose_cmd_prefix` depends on no field of the container).
    probe = _LocalContainer(
        training_job_name="probe",
        instance_type="local",
        instance_count=1,
        image=next(iter(services.values()))["image"],
        container_root=str(root),
        input_data_config=[],
        environment=None,
        hyper_parameters=None,
        container_entrypoint=None,
        container_arguments=None,
    )
    prefix = probe._get_compose_cmd_prefix()
    ids = subprocess.run(
        [*prefix, "-f", str(compose_file), "ps", "-q"], capture_output=True, text=True, check=True
    ).stdout.split()
    inspected = subprocess.run(
        ["docker", "inspect", "--format", "{{.Name}} {{.Image}}", *ids], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    return {
        "compose": prefix,
        "services": {name: service["image"] for name, service in services.items()},
        "containers": dict(line.split() for line in inspected if line.strip()),
    }


def main() -> None:
    import boto3
    from trainctl.job import Job
    from trainctl.targets.sagemaker import engine

    job_file, mode = sys.argv[1], sys.argv[2]
    session = boto3.Session()
    calls: list[tuple[str, dict[str, Any]]] = []
    session.events.register(
        "provide-client-params.*.*",
        lambda params, event_name, **_: calls.append((event_name, json.loads(json.dumps(params, default=repr)))),
    )
    job = Job.from_yaml(job_file)
    if mode == "local":
        from sagemaker.train.model_trainer import Mode

        image, root = sys.argv[3], Path(sys.argv[4])
        trainer = job.to_model_trainer(
            boto_session=session,
            training_mode=Mode.LOCAL_CONTAINER,
            training_image=image,
            local_container_root=str(root),
        )
    else:
        trainer = job.to_model_trainer(boto_session=session)
    out: dict[str, Any] = {
        "class_mro": [c.__name__ for c in type(trainer).__mro__],
        "module": type(trainer).__mro__[1].__module__,
        "sdk": version("sagemaker-train"),
        "source_code": trainer.source_code,
        "distributed": trainer.distributed,
        "installed": engine.installed_sdk(),
    }
    if mode == "submit":
        trainer.train(wait=False, logs=False)
        creates = [p for name, p in calls if name.endswith("sagemaker.CreateTrainingJob")]
        puts = [p for name, p in calls if name.endswith("s3.PutObject")]
        out["request"] = creates[-1] if creates else None
        out["uploaded"] = [f"s3://{p['Bucket']}/{p['Key']}" for p in puts][-1] if puts else None
    if mode == "local":
        start = time.monotonic()
        trainer.train(wait=True, logs=True)
        out["took_s"] = round(time.monotonic() - start, 1)
        out["instance_type"] = trainer.compute.instance_type
        out["checkpoint_config"] = trainer.checkpoint_config
        out["archived"] = _archived(root)
        out.update(_ran(root))
    out["violations"] = violations
    print(json.dumps(out, default=repr))


if __name__ == "__main__":
    main()
