"""Each bad input stops with one clear message naming what and where, exit 2, no traceback.

The trainer runs as a real single process (`python -m trainer.train`); all cases run at once
to keep the wall time down.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import PY, clean_env

Case = Callable[[Path, Path], tuple[list[str], str]]


def _digits_line(y: int = 3) -> str:
    return json.dumps({"x": [0.5] * 64, "y": y})


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def missing_file(tmp: Path, digits: Path) -> tuple[list[str], str]:
    return ["--train-data", str(tmp / "nope.jsonl")], f"no such file or directory: {tmp / 'nope.jsonl'}"


def empty_file(tmp: Path, digits: Path) -> tuple[list[str], str]:
    (tmp / "empty.jsonl").write_text("")
    return ["--train-data", str(tmp / "empty.jsonl")], f"{tmp / 'empty.jsonl'} is empty"


def malformed_line(tmp: Path, digits: Path) -> tuple[list[str], str]:
    path = _write(tmp / "bad.jsonl", [_digits_line(), _digits_line(), '{"x": [0.5, 0.5], "y": ', _digits_line()])
    return ["--train-data", str(path)], f"{path}:3: malformed JSON line"


def malformed_line_streaming(tmp: Path, digits: Path) -> tuple[list[str], str]:
    path = _write(tmp / "bad.jsonl", [_digits_line()] * 40 + ["not json at all"] + [_digits_line()] * 5)
    return [
        "--train-data",
        str(path),
        "--streaming",
        "true",
        "--batch-size",
        "4",
    ], f"{path}:41: malformed JSON"


def wrong_record_field(tmp: Path, digits: Path) -> tuple[list[str], str]:
    path = _write(tmp / "bad.jsonl", [_digits_line(), json.dumps({"x": "pixels", "y": 1})])
    return ["--train-data", str(path)], f"{path}:2: 'x' must be a list of numbers"


def label_out_of_range(tmp: Path, digits: Path) -> tuple[list[str], str]:
    path = _write(tmp / "bad.jsonl", [_digits_line(), _digits_line(12)])
    return ["--train-data", str(path)], f"{path}:2: label 12, but model 'digits' has 10 classes"


def wrong_type_flag(tmp: Path, digits: Path) -> tuple[list[str], str]:
    return ["--train-data", str(digits / "train.jsonl"), "--batch-size", "many"], (
        "config field 'batch_size': got 'many', expected an integer"
    )


def wrong_type_in_file(tmp: Path, digits: Path) -> tuple[list[str], str]:
    (tmp / "job.yaml").write_text(f"train_data: {digits / 'train.jsonl'}\nepochs: [1, 2]\n")
    return ["--config", str(tmp / "job.yaml")], "config field 'epochs': got [1, 2], expected an integer"


def unknown_field(tmp: Path, digits: Path) -> tuple[list[str], str]:
    return ["--train-data", str(digits / "train.jsonl"), "--batchsize", "8"], (
        "unknown config field 'batchsize'; did you mean 'batch_size'?"
    )


def unknown_model(tmp: Path, digits: Path) -> tuple[list[str], str]:
    return [
        "--train-data",
        str(digits / "train.jsonl"),
        "--model",
        "resnet9000",
    ], "unknown model 'resnet9000'"


def unset_env_reference(tmp: Path, digits: Path) -> tuple[list[str], str]:
    return [
        "--train-data",
        "${TRAINER_DATA_NOPE}/train.jsonl",
    ], "environment variable TRAINER_DATA_NOPE is not set"


def checkpoint_from_other_model(tmp: Path, digits: Path) -> tuple[list[str], str]:
    return ["--train-data", str(digits / "train.jsonl"), "--checkpoint-dir", str(tmp.parent / "mlp-ckpt")], (
        "was written by model 'mlp-regression', but this run trains 'digits'"
    )


CASES: dict[str, Case] = {
    f.__name__: f
    for f in (
        missing_file, empty_file, malformed_line, malformed_line_streaming, wrong_record_field,
        label_out_of_range, wrong_type_flag, wrong_type_in_file, unknown_field, unknown_model,
        unset_env_reference, checkpoint_from_other_model,
    )
}  # fmt: skip


def _train(args: list[str], out: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    cmd = [PY, "-m", "trainer.train", "--output-dir", str(out), *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _regression_data(path: Path) -> Path:
    rows = []
    for i in range(64):
        x = [((i * 7 + j * 3) % 11) / 10 for j in range(4)]
        rows.append(json.dumps({"x": x, "y": 2 * x[0] - x[1] + 0.5 * x[3]}))
    return _write(path, rows)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory, digits_dir: Path) -> dict[str, Any]:
    """Two small real runs that leave checkpoints behind, then every bad-input case at once."""
    tmp = tmp_path_factory.mktemp("bad")
    env = clean_env(tmp)
    reg = _regression_data(tmp / "reg.jsonl")
    common = ["--batch-size", "16", "--checkpoint-every", "2", "--log-every", "1"]
    mlp = _train(
        ["--model", "mlp-regression", "--train-data", str(reg), "--max-steps", "2",
         "--checkpoint-dir", str(tmp / "mlp-ckpt"), *common],
        tmp / "mlp-out", env,
    )  # fmt: skip
    digits = _train(
        ["--train-data", str(digits_dir / "train.jsonl"), "--max-steps", "4",
         "--checkpoint-dir", str(tmp / "digits-ckpt"), *common],
        tmp / "digits-out", env,
    )  # fmt: skip
    for proc in (mlp, digits):
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
    procs = {}
    for name, case in CASES.items():
        case_dir = tmp / name
        case_dir.mkdir()
        args, expected = case(case_dir, digits_dir)
        procs[name] = (_train(args, case_dir / "out", env), expected)
    results = {}
    for name, (proc, expected) in procs.items():
        out, err = proc.communicate(timeout=120)
        results[name] = (proc.returncode, out + err, expected)
    return {"tmp": tmp, "results": results, "env": env, "common": common}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_one_clear_message(prepared: dict[str, Any], case: str) -> None:
    code, output, expected = prepared["results"][case]
    assert code == 2, output[-3000:]
    assert expected in output, output[-3000:]
    assert "Traceback" not in output
    assert sum("error:" in line for line in output.splitlines()) == 1, output


def test_corrupt_and_half_written_checkpoints_are_skipped(prepared: dict[str, Any], digits_dir: Path) -> None:
    """step 4's state.pt is garbage of the right size, step 6 was never completed: resume from 2."""
    tmp: Path = prepared["tmp"]
    ckpt = tmp / "corrupt-ckpt"
    shutil.copytree(tmp / "digits-ckpt", ckpt)
    assert sorted(p.name for p in ckpt.iterdir()) == ["latest", "step-00000002", "step-00000004"]
    state = ckpt / "step-00000004" / "state.pt"
    state.write_bytes(b"\0garbage" * (state.stat().st_size // 8) + b"\0" * (state.stat().st_size % 8))
    half = ckpt / "step-00000006"
    half.mkdir()
    (half / "state.pt").write_bytes(b"PK\x03\x04 partial")
    (ckpt / ".tmp-step-00000008").mkdir()
    out = tmp / "corrupt-out"
    proc = _train(
        ["--train-data", str(digits_dir / "train.jsonl"), "--max-steps", "6", "--checkpoint-dir", str(ckpt),
         *prepared["common"]],
        out, prepared["env"],
    )  # fmt: skip
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    assert f"skipping unusable checkpoint: {half}: no meta.json" in stderr
    assert f"skipping unusable checkpoint: {state}: CRC-32 mismatch in bytes 0-" in stderr  # its region checksums
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from"] == str(ckpt / "step-00000002") and summary["steps"] == 6
    assert not (ckpt / ".tmp-step-00000008").exists()
    assert (ckpt / "latest").read_text().strip() == "step-00000006"
