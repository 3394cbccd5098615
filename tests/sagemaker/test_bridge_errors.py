"""The SageMaker SDK bridges from a fresh install (issue 27, finding 15): `trainctl[sagemaker]` brings SDK 3, so
`to_estimator()` names the extra that brings SDK 2 (`trainctl[sagemaker2]`) and `to_model_trainer()`; and
`to_model_trainer()` without AWS credentials says what is missing and how to give it, not botocore's bare
NoCredentialsError. Run in .venv-sm3 (SDK 3.x), with every connection but 127.0.0.1 refused."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import tomllib

from .conftest import SM3_PYTHON

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import json, socket, sys
def refuse(*args, **kwargs):
    raise OSError("test: no connection outside 127.0.0.1")
real = socket.socket.connect
socket.socket.connect = lambda self, addr: real(self, addr) if addr[0] in ("127.0.0.1", "localhost") else refuse()
from trainctl import Job
from trainctl.errors import EngineError
job = Job.from_yaml(sys.argv[1])
out = {}
for bridge in ("to_estimator", "to_model_trainer"):
    try:
        getattr(job, bridge)()
        out[bridge] = None
    except Exception as exc:
        out[bridge] = [type(exc).__name__, str(exc)]
print(json.dumps(out))
"""


def test_bridges_on_sdk3_without_credentials_say_what_to_do(tmp_path: Path) -> None:
    assert SM3_PYTHON.exists(), "the SDK 3.x venv is missing: run scripts/setup.sh (it makes .venv-sm3)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "TRAINCTL_HOME": str(tmp_path / "home"),
    }
    job = REPO / "examples" / "digits-sagemaker.yaml"
    done = subprocess.run(
        [str(SM3_PYTHON), "-c", SCRIPT, str(job)], capture_output=True, text=True, timeout=300, env=env, check=True
    )
    out = json.loads(done.stdout.splitlines()[-1])
    kind, text = out["to_estimator"]
    assert kind == "EngineError" and "pip install 'trainctl[sagemaker2]'" in text and "to_model_trainer()" in text
    assert "SDK 3." in text, text  # which SDK is installed
    kind, text = out["to_model_trainer"]
    assert kind == "EngineError", (kind, text)
    assert "AWS credentials" in text and "AWS_PROFILE" in text and "boto_session=" in text


def test_the_sagemaker2_extra_pins_sdk_2() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "sagemaker>=2.257,<3" in extras["sagemaker2"] and any(d.startswith("boto3") for d in extras["sagemaker2"])


@pytest.mark.parametrize("extra", ["sagemaker", "sagemaker2"])
def test_the_extras_are_named_in_the_docs(extra: str) -> None:
    assert f"trainctl[{extra}]" in (REPO / "docs" / "sagemaker.md").read_text()
