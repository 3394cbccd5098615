"""SageMaker's container conventions, read from files under a root (so tests use a tmp dir).

Hyperparameters arrive in `hyperparameters.json` as JSON-encoded strings (`"3"`, `"\"digits\""`,
`"[\"python\", ...]"`); they are decoded once and turned back into the trainer's flag forms.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...config import flag_text
from ...errors import TrainerInputError
from .toolkit_env import SAGEMAKER_HYPERPARAMETERS, to_cmd_args

ML = "opt/ml"
RESOURCE_CONFIG = f"{ML}/input/config/resourceconfig.json"
HYPERPARAMETERS = f"{ML}/input/config/hyperparameters.json"
INPUT_DATA_CONFIG = f"{ML}/input/config/inputdataconfig.json"
DATA_DIR = f"{ML}/input/data"
CODE_TARBALL = f"{ML}/input/data/code/sourcedir.tar.gz"
CODE_DIR = f"{ML}/code"
CHECKPOINT_DIR = f"{ML}/checkpoints"
MODEL_DIR = f"{ML}/model"
FAILURE_FILE = f"{ML}/output/failure"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TrainerInputError(f"{path}: cannot read SageMaker config: {exc}") from exc


def read_resource_config(root: Path) -> dict[str, Any]:
    """resourceconfig.json as written (host order kept: the toolkit indexes `hosts` as given)."""
    path = root / RESOURCE_CONFIG
    data = _read_json(path)
    try:
        current, hosts = data["current_host"], list(data["hosts"])
        for group in data.get("instance_groups", []):
            if not isinstance(group["instance_group_name"], str) or not isinstance(group["hosts"], list):
                raise TypeError(f"instance group {group!r}")
    except (KeyError, TypeError, AttributeError) as exc:
        raise TrainerInputError(
            f"{path}: needs 'current_host', 'hosts' and instance_groups of instance_group_name and hosts: {exc!r}"
        ) from exc
    if current not in hosts:
        raise TrainerInputError(f"{path}: current_host {current!r} is not in hosts {hosts}")
    return dict(data)


def _json_object(path: Path) -> dict[str, Any]:
    """A config file holding one JSON object; {} when absent (SageMaker writes only the files a job has)."""
    if not path.exists():
        return {}
    data = _read_json(path)
    if not isinstance(data, dict):
        raise TrainerInputError(f"{path}: expected a JSON object")
    return data


def read_input_data_config(root: Path) -> dict[str, Any]:
    """inputdataconfig.json (channel name -> its settings); {} when absent."""
    return _json_object(root / INPUT_DATA_CONFIG)


def decode_value(raw: Any) -> Any:
    """One hyperparameter: JSON-decoded when it is JSON text, else the raw string."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def read_raw_hyperparameters(root: Path) -> dict[str, Any]:
    """hyperparameters.json as written (values are JSON text); {} when absent."""
    return {str(k): v for k, v in _json_object(root / HYPERPARAMETERS).items()}


def read_hyperparameters(root: Path) -> dict[str, Any]:
    return {k: decode_value(v) for k, v in read_raw_hyperparameters(root).items()}


def hyperparameter_flags(hp: dict[str, Any], skip_prefixes: tuple[str, ...]) -> list[str]:
    """`--key value` pairs, in sorted key order so the argv is deterministic."""
    argv: list[str] = []
    for key in sorted(hp):
        if key.startswith(skip_prefixes):
            continue
        argv += [f"--{key.replace('_', '-')}", flag_text(hp[key])]
    return argv


def local_code_dir(hp: dict[str, Any], root: Path) -> Path | None:
    """The code folder when `sagemaker_submit_directory` names one (the SDK's local mode with `local_code`).

    The SDK's local mode mounts the source folder at /opt/ml/code and sets the hyperparameter to
    "/opt/ml/code" (sagemaker/local/image.py `_SageMakerContainer._update_local_src_path`; the estimator
    wrote `file://<host folder>` before that). The toolkit then uses the folder as it is instead of a
    tarball (sagemaker_training/files.py `download_and_extract`: `os.path.isdir(uri)`). An s3:// value
    (or none) means the tarball of the `code` channel.
    """
    where = hp.get("sagemaker_submit_directory")
    if not isinstance(where, str) or not where or where.startswith("s3://"):
        return None
    folder = root / where.removeprefix("file://").lstrip("/")
    return folder if folder.is_dir() and any(folder.iterdir()) else None


def channels(root: Path) -> list[str]:
    """Input channel names: from inputdataconfig.json and the directories that exist."""
    names: set[str] = set()
    cfg = root / INPUT_DATA_CONFIG
    if cfg.exists():
        data = _read_json(cfg)
        if isinstance(data, dict):
            names.update(str(k) for k in data)
    data_dir = root / DATA_DIR
    if data_dir.is_dir():
        names.update(p.name for p in data_dir.iterdir() if p.is_dir())
    return sorted(names)


def program_from_hyperparameters(hp: dict[str, Any], root: Path, python: str) -> tuple[list[str], bool]:
    """The argv to run when no PROGRAM was given, and whether the code tarball must be unpacked."""
    command = hp.get("trainctl_command")
    if command is not None:
        if isinstance(command, str):
            command = decode_value(command)
        if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
            raise TrainerInputError(f"hyperparameter trainctl_command must be a JSON list of strings, got {command!r}")
        # with a submit directory (launch: per_node with code), the argv runs from the unpacked code
        return list(command), bool(hp.get("sagemaker_submit_directory"))
    script = hp.get("sagemaker_program")
    if script is not None:
        # the toolkit's arguments exactly (Environment.to_cmd_args): `--learning_rate 0.1`, `--flag True`
        user_hps = {
            k: v for k, v in hp.items() if k not in SAGEMAKER_HYPERPARAMETERS and not k.startswith("sagemaker_")
        }
        return [python, str(script), *to_cmd_args(user_hps)], True
    return [python, "-m", "trainer.train", *hyperparameter_flags(hp, ("sagemaker_", "trainctl_"))], False
