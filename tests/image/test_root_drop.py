"""One image for every target: it starts as root, and the launcher drops to uid 10001 before the job runs.

SageMaker and the SDK's local mode cannot pass a user and mount /opt/ml as root (the SDK's folders are
mode 0700); tests/sagemaker/test_sdk_local_mode.py runs this same image under the SDK's own local mode.
Every other target passes `--user 10001` / `runAsUser: 10001` itself (tested with their runs).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

# As root, make a SageMaker-like /opt/ml (a 0700 channel of root's), then start `train` as SageMaker
# does; the job (run by torchrun like any program) reports who it runs as and who owns the folders now.
PROBE = (
    "install -d -m 700 /opt/ml/input/data/train && touch /opt/ml/input/data/train/part-0 "
    "&& chown 0:0 /opt/ml/model && exec train --platform local --nproc-per-node 1 -- "
    "sh -c 'id -u; id -g; stat -c %u /opt/ml/input/data/train/part-0 /opt/ml/model; echo $HOME'"
)


def _run(trainer_image: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [trainer_image.runtime, "run", "--rm", "--network", "none", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_the_image_starts_as_root_and_names_its_trainer_user(trainer_image: Any) -> None:
    out = subprocess.run(
        [trainer_image.runtime, "image", "inspect", trainer_image.ref], capture_output=True, text=True, check=True
    ).stdout
    config = json.loads(out)[0]["Config"]
    assert config["User"] == "0:0"
    assert "TRAINCTL_TRAINER_UID=10001" in config["Env"]
    assert config["Labels"]["io.trainctl.trainer.uid"] == "10001"
    assert config["Entrypoint"] == ["trainer-launch"]


def test_started_as_root_the_launcher_hands_over_opt_ml_and_drops_to_10001(trainer_image: Any) -> None:
    run = _run(trainer_image, "--entrypoint", "sh", trainer_image.ref, "-c", PROBE)
    assert run.returncode == 0, run.stderr
    lines = [line.removeprefix("[rank0] ") for line in run.stdout.splitlines()[-5:]]  # the launcher's rank prefix
    uid, gid, data_owner, model_owner, home = lines
    assert (uid, gid) == ("10001", "10001")
    assert (data_owner, model_owner) == ("10001", "10001")  # root's 0700 channel and model folder handed over
    assert home == "/home/trainer"
    assert "as uid 10001 (started as root)" in run.stderr


def test_keep_root_is_an_explicit_choice(trainer_image: Any) -> None:
    run = _run(
        trainer_image, "-e", "TRAINCTL_KEEP_ROOT=1", trainer_image.ref, "--platform", "local",
        "--nproc-per-node", "1", "--", "id", "-u",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[-1] == "0"


def test_with_the_trainer_user_and_a_read_only_root_nothing_changes(trainer_image: Any) -> None:
    run = _run(
        trainer_image, "--user", "10001", "--read-only", trainer_image.ref, "--platform", "local",
        "--nproc-per-node", "1", "--", "id", "-u",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[-1] == "10001"
    assert "started as root" not in run.stderr
