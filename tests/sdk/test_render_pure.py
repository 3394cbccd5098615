"""Render is pure (issue 23): a `code:` job's folder is packed once, in the explicit step before render
(bundle.prepare); render then reads only that, on every target, and opens no file. An audit hook
(sys.addaudithook) sees every `open` and folder listing the interpreter makes while a render runs."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from trainctl import Job
from trainctl.errors import JobError
from trainctl.submit.bundle import NotPrepared, bundle_for, prepare, prepared
from trainctl.targets.lookup import get_target
from trainctl.targets.registry import names

REPO = Path(__file__).resolve().parents[2]
WATCHED = ("open", "os.listdir", "os.scandir", "os.walk")
_seen: list[tuple[str, tuple[object, ...]]] | None = None


def _hook(event: str, args: tuple[object, ...]) -> None:
    if _seen is not None and event in WATCHED:
        _seen.append((event, args))


sys.addaudithook(_hook)  # hooks cannot be removed: it records only inside `watching`


@contextmanager
def watching() -> Iterator[list[tuple[str, tuple[object, ...]]]]:
    global _seen
    _seen = found = []
    try:
        yield found
    finally:
        _seen = None


def code_job(tmp_path: Path) -> Job:
    """examples/code-job with what the SageMaker target needs to render, in a copy of its folder."""
    import shutil

    shutil.copytree(REPO / "examples" / "code-job", tmp_path / "code-job")
    sets = [
        "sagemaker.role_arn=arn:aws:iam::123456789012:role/SageMakerRole",
        "sagemaker.instance_type=ml.m5.xlarge",
        "sagemaker.output_s3_uri=s3://bucket/output/",
        "image=123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1",
    ]
    return Job.from_yaml(tmp_path / "code-job" / "job.yaml").with_overrides(sets)


def test_the_watch_sees_a_file_being_read(tmp_path: Path) -> None:
    """The hook itself: reading a file or listing a folder inside the watch is recorded."""
    (tmp_path / "f").write_text("x")
    with watching() as seen:
        (tmp_path / "f").read_text()
        list((tmp_path).iterdir())
    events = {event for event, _ in seen}
    assert "open" in events and events & {"os.listdir", "os.scandir"}, events
    assert any(str(tmp_path / "f") in str(args[0]) for event, args in seen if event == "open")
    job = code_job(tmp_path)
    with watching() as seen:
        bundle_for(job)  # packing reads every file of the folder
    assert sum(event == "open" for event, _ in seen) >= 2


@pytest.mark.parametrize("target", names())
def test_rendering_a_prepared_code_job_opens_no_file(target: str, tmp_path: Path) -> None:
    job = prepare(code_job(tmp_path))
    chosen = get_target(target)
    first = chosen.render(job)  # the target's modules are imported now (imports read files)
    bundle = prepared(job)
    assert bundle is not None and bundle.sha256 in first.text + " ".join(first.notes)
    with watching() as seen:
        again = chosen.render(job)
    assert seen == [], f"{target} render touched files: {seen[:5]}"
    assert again.text == first.text


def test_render_refuses_a_code_job_that_was_not_prepared(tmp_path: Path) -> None:
    job = code_job(tmp_path)
    with pytest.raises(NotPrepared, match=r"call trainctl\.submit\.bundle\.prepare"):
        get_target("slurm").render(job)
    assert job.render("slurm").text == get_target("slurm").render(prepare(job)).text  # Job.render prepares
    # a bundle prepared for other code is not used: the job changed since
    moved = prepare(job).model_copy(update={"code": job.code.model_copy(update={"exclude": []})})  # type: ignore[union-attr]
    with pytest.raises(NotPrepared):
        get_target("local").render(moved)


def test_a_missing_folder_is_refused_on_render_but_a_sagemaker_render_names_no_hash(tmp_path: Path) -> None:
    job = prepare(code_job(tmp_path).with_overrides(["code.dir=./nowhere"]))
    with pytest.raises(JobError, match=r"code\.dir: .*nowhere.* is not a directory"):
        get_target("slurm").render(job)
    assert "TRAINER_CODE_SHA256" not in get_target("sagemaker").render(job).text
