"""Run in .venv-sm3 (SageMaker SDK 3.x) by test_model_trainer.py: build, or build and train, a job's ModelTrainer.

`python sm3_driver.py JOB.yaml build|submit` prints one JSON line: the trainer's class and SDK version, and
for `submit` the CreateTrainingJob parameters as the SDK passed them (botocore's provide-client-params hook)
and where the code tarball was uploaded. A socket guard refuses and records every resolve or connect to a
host other than 127.0.0.1 (the SDK swallows telemetry errors, so the attempt itself is what counts).
"""

from __future__ import annotations

import json
import socket
import sys
from importlib.metadata import version
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
    trainer = Job.from_yaml(job_file).to_model_trainer(boto_session=session)
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
    out["violations"] = violations
    print(json.dumps(out, default=repr))


if __name__ == "__main__":
    main()
