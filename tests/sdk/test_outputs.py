"""One reader of a run's output folder: the local target (a path here) and SLURM (`cat` through its shell, here
the local one) read summary.json, metrics.jsonl and progress.json alike, whatever state the files are in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trainctl.runs import outputs
from trainctl.runs.state import Paths, RunRef
from trainctl.targets.local import engine as local_engine
from trainctl.targets.slurm import engine as slurm_engine
from trainctl.targets.slurm.handle import SlurmHandle

SUMMARY = json.dumps({"world_size": 2, "steps": 30}).encode()
ROW = json.dumps({"step": 10, "loss": 0.5}).encode()
PROGRESS = json.dumps({"step": 10, "total_steps": 30, "updated_at": 5.0}).encode()

# name -> the folder's files, and what is read: (summary, metrics, progress step)
CASES: dict[str, tuple[dict[str, bytes], tuple[object, object, object]]] = {
    "no files": ({}, (None, None, None)),
    "empty files": (
        {"summary.json": b"", "metrics.jsonl": b"", "progress.json": b""},
        (None, [], None),
    ),
    "whole files": (
        {"summary.json": SUMMARY, "metrics.jsonl": ROW + b"\n", "progress.json": PROGRESS},
        (json.loads(SUMMARY), [json.loads(ROW)], 10),
    ),
    "cut short by a running writer": (
        {"summary.json": SUMMARY[:-3], "metrics.jsonl": ROW + b"\n" + ROW[:-4], "progress.json": PROGRESS[:5]},
        (None, [json.loads(ROW)], None),
    ),
    "not UTF-8": (
        {
            "summary.json": b"\xff\xfe",
            "metrics.jsonl": b'{"step": 3, "note": "\xff"}\n' + ROW,
            "progress.json": b"\xff",
        },
        (None, [{"step": 3, "note": "\ufffd"}, json.loads(ROW)], None),
    ),
    "not what it should be": (
        {"summary.json": b"[1, 2]", "metrics.jsonl": b'["a"]\n{"loss": 1}\n', "progress.json": b'"step"'},
        (None, [], None),
    ),
}


def _read(engine: object, run: RunRef) -> tuple[object, object, object]:
    progress = engine.progress(run)  # type: ignore[attr-defined]
    return engine.summary(run), engine.metrics(run), progress.step if progress else None  # type: ignore[attr-defined]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_target_reads_the_output_folder_alike(tmp_path: Path, case: str) -> None:
    files, expected = CASES[case]
    out = tmp_path / "out"
    out.mkdir()
    for name, data in files.items():
        (out / name).write_bytes(data)
    assert _read(outputs, outputs.folder(out)) == expected  # type: ignore[arg-type]
    (tmp_path / "spec.json").write_text("{}")  # a local run's folder (its log.txt, with no progress line, is absent)
    local = RunRef(target="local", native_id="r1", paths=Paths(output_dir=str(out), run_dir=str(tmp_path)))
    slurm = RunRef(target="slurm", native_id="7", paths=Paths(output_dir=str(out)), handle=SlurmHandle())
    assert _read(local_engine, local) == expected
    assert _read(slurm_engine, slurm) == expected


def test_a_run_without_an_output_folder_has_nothing_to_read() -> None:
    read = outputs.folder(None)
    assert (outputs.summary(read), outputs.metrics(read), outputs.progress(read)) == (None, None, None)
