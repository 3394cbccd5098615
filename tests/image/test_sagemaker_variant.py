"""The `-sagemaker` tag: the same layers as the trainer image, USER 0, and a `train` that drops to 10001.

SageMaker and the SDK's local mode cannot pass a user and mount /opt/ml as root (the SDK's folders are
mode 0700); tests/sagemaker/test_sdk_local_mode.py runs this tag under the SDK's own local mode.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

# A stand-in launcher on PATH reports who `train` handed over to; `train` and setpriv are the image's own.
PROBE = (
    "install -d -m 700 /opt/ml/input/data/train && touch /opt/ml/input/data/train/part-0 "
    "&& printf '#!/bin/sh\\nid -u; id -g; stat -c %%u /opt/ml/input/data/train/part-0 /opt/ml/model; echo \"$@\"\\n' "
    "> /tmp/trainer-launch && chmod +x /tmp/trainer-launch && PATH=/tmp:$PATH exec train --nproc-per-node 2"
)


def _inspect(runtime: str, ref: str) -> dict[str, Any]:
    out = subprocess.run([runtime, "image", "inspect", ref], capture_output=True, text=True, check=True).stdout
    found: dict[str, Any] = json.loads(out)[0]
    return found


def test_sagemaker_tag_is_the_same_layers_as_root(trainer_image: Any) -> None:
    plain = _inspect(trainer_image.runtime, trainer_image.ref)
    sm = _inspect(trainer_image.runtime, f"{trainer_image.ref}-sagemaker")
    assert plain["Config"]["User"] == "10001:10001"  # every other target stays non-root
    assert sm["Config"]["User"] == "0:0"
    assert sm["RootFS"]["Layers"] == plain["RootFS"]["Layers"]
    assert sm["Config"]["Entrypoint"] == plain["Config"]["Entrypoint"]


def test_train_started_as_root_drops_to_the_trainer_user(trainer_image: Any) -> None:
    ref = f"{trainer_image.ref}-sagemaker"
    run = subprocess.run(
        [trainer_image.runtime, "run", "--rm", "--network", "none", "--entrypoint", "sh", ref, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    uid, gid, data_owner, model_owner, args = run.stdout.splitlines()
    assert (uid, gid) == ("10001", "10001")
    assert (data_owner, model_owner) == ("10001", "10001")  # root's 0700 channel handed over
    assert args == "--nproc-per-node 2"


def test_plain_image_stays_non_root_and_carries_setpriv(trainer_image: Any) -> None:
    run = subprocess.run(
        [trainer_image.runtime, "run", "--rm", "--network", "none", "--read-only", trainer_image.ref, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    probe = subprocess.run(
        [
            trainer_image.runtime,
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "sh",
            trainer_image.ref,
            "-c",
            "id -u; command -v setpriv",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.stdout.split() == ["10001", "/usr/bin/setpriv"]
