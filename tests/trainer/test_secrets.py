"""The launcher resolves `TRAINCTL_SECRET_<ENV>=<id>[#key]` from Secrets Manager (moto over HTTP on 127.0.0.1).

Every test runs the real launcher in a subprocess under a fake SageMaker root; its PROGRAM writes the
environment the torchrun worker got to a file. Values must reach the worker and never the launcher's output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from trainer.errors import TrainerInputError
from trainer.launcher.secrets import SecretRef, requested

PY = sys.executable
REGION = "us-east-1"
PLAIN = "plain-Value-3f9c1e"
JSON_TOKEN = "json-Token-8a27d4"
JSON_OTHER = "json-Other-55b0aa"
VALUES = (PLAIN, JSON_TOKEN, JSON_OTHER)
ENV_DUMP = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def _client(endpoint: str, service: str, key: str = "testing", secret: str = "testing") -> Any:
    import boto3

    session = boto3.Session(aws_access_key_id=key, aws_secret_access_key=secret, region_name=REGION)
    return session.client(service, endpoint_url=endpoint)


@pytest.fixture(scope="module")
def secret_arns(moto_endpoint: str) -> dict[str, str]:
    sm = _client(moto_endpoint, "secretsmanager")
    plain = sm.create_secret(Name="prod/plain", SecretString=PLAIN)["ARN"]
    blob = sm.create_secret(Name="prod/json", SecretString=json.dumps({"token": JSON_TOKEN, "other": JSON_OTHER}))
    return {"plain": plain, "json": blob["ARN"]}


def _sagemaker_root(root: Path) -> Path:
    cfg = root / "opt/ml/input/config"
    cfg.mkdir(parents=True)
    (cfg / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]}))
    (cfg / "hyperparameters.json").write_text("{}")
    return root


def _env(tmp: Path, endpoint: str, secrets: dict[str, str], **extra: str) -> dict[str, str]:
    """A clean SageMaker-like environment: fake keys, moto as every AWS endpoint, no config files."""
    import os

    keep = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SM_", "TRAINER_", "TRAINCTL_", "PET_"))}
    keep = {k: v for k, v in keep.items() if not k.startswith(("SLURM_", "TORCHELASTIC_")) and k != "LOCAL_RANK"}
    empty = tmp / "aws-empty"
    tmp.mkdir(parents=True, exist_ok=True)
    empty.write_text("")
    env = {
        **keep,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
        "TRAINER_SAGEMAKER_ROOT": str(_sagemaker_root(tmp / "sm")),
        "SM_NUM_GPUS": "0",
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.update({f"TRAINCTL_SECRET_{k}": v for k, v in secrets.items()})
    env.update(extra)
    return env


def _launch(env: dict[str, str], dump: Path, *options: str) -> subprocess.CompletedProcess[str]:
    argv = [PY, "-m", "trainer.launch", *options, "--", PY, "-c", ENV_DUMP, str(dump)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def _assert_no_value(out: subprocess.CompletedProcess[str], root: Path) -> None:
    failure = root / "opt/ml/output/failure"
    texts = [out.stdout, out.stderr, failure.read_text() if failure.exists() else ""]
    for value in VALUES:
        assert not any(value in text for text in texts), f"secret value leaked into the launcher's output: {value}"


def test_worker_gets_values_and_the_requests_are_gone(
    tmp_path: Path, moto_endpoint: str, secret_arns: dict[str, str]
) -> None:
    secrets = {
        "WANDB_API_KEY": "prod/plain",  # by name, region from AWS_DEFAULT_REGION
        "HF_TOKEN": f"{secret_arns['json']}#token",  # by ARN, one JSON key
        "OTHER": "prod/json#other",
    }
    env = _env(tmp_path, moto_endpoint, secrets, WANDB_API_KEY="overridden-by-the-secret")
    dump = tmp_path / "worker-env.json"
    out = _launch(env, dump)
    assert out.returncode == 0, out.stderr[-3000:]
    worker = json.loads(dump.read_text())
    assert (worker["WANDB_API_KEY"], worker["HF_TOKEN"], worker["OTHER"]) == (PLAIN, JSON_TOKEN, JSON_OTHER)
    assert worker["LOCAL_RANK"] == "0" and worker["TRAINER_OUTPUT_DIR"].endswith("opt/ml/model")
    assert [k for k in worker if k.startswith("TRAINCTL_SECRET_")] == []
    assert "resolved 3 secret(s) from AWS Secrets Manager: HF_TOKEN, OTHER, WANDB_API_KEY" in out.stderr
    _assert_no_value(out, Path(env["TRAINER_SAGEMAKER_ROOT"]))


def test_missing_secret_exits_2_naming_variable_and_id(
    tmp_path: Path, moto_endpoint: str, secret_arns: dict[str, str]
) -> None:
    # the first one resolves, the second is missing: nothing starts and nothing of the first leaks
    env = _env(tmp_path, moto_endpoint, {"A_KEY": "prod/plain", "B_KEY": "prod/missing"})
    dump = tmp_path / "worker-env.json"
    out = _launch(env, dump)
    assert out.returncode == 2, out.stderr[-3000:]
    assert not dump.exists()
    assert "secret for B_KEY (prod/missing): not found in Secrets Manager" in out.stderr
    assert "Traceback" not in out.stderr
    root = Path(env["TRAINER_SAGEMAKER_ROOT"])
    assert "B_KEY (prod/missing)" in (root / "opt/ml/output/failure").read_text()
    _assert_no_value(out, root)


def test_missing_json_key_and_non_json_secret(tmp_path: Path, moto_endpoint: str, secret_arns: dict[str, str]) -> None:
    for i, (ref, expected) in enumerate(
        [
            ("prod/json#nope", "secret for TOK (prod/json): the JSON secret has no key 'nope'"),
            ("prod/plain#token", "secret for TOK (prod/plain): #token needs a JSON object secret"),
        ]
    ):
        env = _env(tmp_path / str(i), moto_endpoint, {"TOK": ref})
        out = _launch(env, tmp_path / f"dump{i}.json")
        assert out.returncode == 2 and expected in out.stderr, out.stderr[-3000:]
        _assert_no_value(out, Path(env["TRAINER_SAGEMAKER_ROOT"]))


def test_dry_run_lists_and_fetches_nothing(tmp_path: Path, moto_endpoint: str) -> None:
    # ids that do not exist: a fetch would fail with exit 2, so exit 0 proves none was made
    env = _env(tmp_path, moto_endpoint, {"WANDB_API_KEY": "nowhere/wandb", "HF_TOKEN": "nowhere/hf#token"})
    out = _launch(env, tmp_path / "dump.json", "--dry-run")
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout)["secrets"] == [
        {"env": "HF_TOKEN", "secret_id": "nowhere/hf", "key": "token"},
        {"env": "WANDB_API_KEY", "secret_id": "nowhere/wandb", "key": None},
    ]


def test_access_denied_names_the_permission(
    tmp_path: Path, moto_endpoint: str, secret_arns: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real IAM denial: a user with no Secrets Manager permission, moto enforcing IAM for this test."""
    import moto.settings
    from moto.core.authorization import ActionAuthenticatorMixin

    iam = _client(moto_endpoint, "iam")
    iam.create_user(UserName="no-secrets")
    iam.put_user_policy(
        UserName="no-secrets",
        PolicyName="s3-only",
        PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        ),
    )
    keys = iam.create_access_key(UserName="no-secrets")["AccessKey"]
    monkeypatch.setattr(ActionAuthenticatorMixin, "request_count", 0)
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    env = _env(
        tmp_path, moto_endpoint, {"WANDB_API_KEY": "prod/plain"},
        AWS_ACCESS_KEY_ID=keys["AccessKeyId"], AWS_SECRET_ACCESS_KEY=keys["SecretAccessKey"],
    )  # fmt: skip
    out = _launch(env, tmp_path / "dump.json")
    assert out.returncode == 2, out.stderr[-3000:]
    assert (
        "secret for WANDB_API_KEY (prod/plain): access denied; the job's execution role needs "
        "secretsmanager:GetSecretValue on prod/plain"
    ) in out.stderr
    _assert_no_value(out, Path(env["TRAINER_SAGEMAKER_ROOT"]))


def test_without_boto3_exits_2_with_a_clear_message(tmp_path: Path, moto_endpoint: str) -> None:
    shadow = tmp_path / "no-boto3"
    (shadow / "boto3").mkdir(parents=True)
    (shadow / "boto3/__init__.py").write_text("raise ImportError('No module named boto3')\n")
    env = _env(tmp_path, moto_endpoint, {"WANDB_API_KEY": "prod/plain"}, PYTHONPATH=str(shadow))
    out = _launch(env, tmp_path / "dump.json")
    assert out.returncode == 2
    assert "TRAINCTL_SECRET_WANDB_API_KEY asks for AWS Secrets Manager, but boto3 is not installed" in out.stderr
    assert "Traceback" not in out.stderr


def test_no_requests_means_no_aws_at_all(tmp_path: Path) -> None:
    # no TRAINCTL_SECRET_*: the launcher needs neither boto3 nor an endpoint (this one is closed)
    shadow = tmp_path / "no-boto3"
    (shadow / "boto3").mkdir(parents=True)
    (shadow / "boto3/__init__.py").write_text("raise ImportError('No module named boto3')\n")
    env = _env(tmp_path, "http://127.0.0.1:9", {}, PYTHONPATH=str(shadow))
    dump = tmp_path / "dump.json"
    out = _launch(env, dump)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "secret" not in out.stderr and dump.exists()


@pytest.mark.parametrize(
    ("environ", "refs"),
    [
        ({"TRAINCTL_SECRET_X": "a/b", "X": "1"}, [SecretRef("X", "a/b")]),
        (
            {"TRAINCTL_SECRET_B": "arn:aws:secretsmanager:eu-west-1:1:secret:n-AbC#k", "TRAINCTL_SECRET_A": "n"},
            [SecretRef("A", "n"), SecretRef("B", "arn:aws:secretsmanager:eu-west-1:1:secret:n-AbC", "k")],
        ),
    ],
)
def test_requested_parses_id_and_key(environ: dict[str, str], refs: list[SecretRef]) -> None:
    assert requested(environ) == refs


@pytest.mark.parametrize("bad", [{"TRAINCTL_SECRET_X": ""}, {"TRAINCTL_SECRET_X": "id#"}, {"TRAINCTL_SECRET_1X": "id"}])
def test_requested_rejects_malformed(bad: dict[str, str]) -> None:
    with pytest.raises(TrainerInputError, match="TRAINCTL_SECRET_"):
        requested(bad)
