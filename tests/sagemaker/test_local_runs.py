"""`trainctl submit JOB --target sagemaker -O local=true`: the rendered request run as detached containers
algo-1/algo-2 of the trainer image (tests/conftest.py builds it), channels from moto's S3, recorded in
the run store, with status/logs --follow/cancel/summary as for any run. Through the installed entry
point (`python -m trainctl`), so the detached runner outlives the command that started it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from run_cli import trainctl  # tests/support

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
TRAINCTL = [sys.executable, "-m", "trainctl"]


def _sets(spec: Any, image: str) -> list[str]:
    """examples/digits-sagemaker.yaml on CPU containers, with moto's bucket and role."""
    values = {
        "image": image,
        "resources.gpus_per_node": "0",
        "trainer.epochs": "3",
        "trainer.lr": "0.01",
        "data.train": f"s3://{spec.BUCKET}/digits/train/",
        "data.val": f"s3://{spec.BUCKET}/digits/val/",
        "sagemaker.role_arn": spec.ROLE_ARN,
        "sagemaker.instance_type": "ml.c5.xlarge",
        "sagemaker.output_s3_uri": f"s3://{spec.BUCKET}/output/",
    }
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


def _containers(runtime: str, names: list[str]) -> list[str]:
    out = subprocess.run([runtime, "ps", "--all", "--format", "{{.Names}}"], capture_output=True, text=True)
    return [name for name in out.stdout.split() if name in names]


def _upload_digits(spec: Any, endpoint: str) -> None:
    s3 = boto3.client("s3", endpoint_url=endpoint)
    for split in ("train", "val"):
        s3.upload_file(str(REPO / f"examples/data/digits/{split}.jsonl"), spec.BUCKET, f"digits/{split}/{split}.jsonl")


def test_cli_local_trains_digits_on_two_containers(spec: Any, aws: str, trainer_image: Any) -> None:
    _upload_digits(spec, aws)
    image = trainer_image.ref
    start = time.monotonic()
    sub = trainctl(
        "submit", "examples/digits-sagemaker.yaml", "--target", "sagemaker", "-O", "local=true", *_sets(spec, image)
    )
    assert sub.returncode == 0, sub.stderr
    run_id = sub.stdout.split("submitted ", 1)[1].split()[0]
    assert run_id.startswith("sagemaker:local/digits-"), sub.stderr
    runs = json.loads(trainctl("list", "--output", "json").stdout)
    assert run_id in [r["id"] for r in runs], runs
    follow = trainctl("logs", run_id, "--follow", timeout=600)
    took = time.monotonic() - start
    lines = follow.stdout.splitlines()
    assert follow.returncode == 0, follow.stderr
    assert any(line.startswith("[algo-1] ") for line in lines) and any(line.startswith("[algo-2] ") for line in lines)
    assert all(line.startswith(("[algo-1] ", "[algo-2] ")) for line in lines), lines[:5]
    status = json.loads(trainctl("status", run_id, "--output", "json").stdout)
    assert status["state"] == "succeeded", (status, lines[-30:])
    assert status["native_state"] == "Completed"
    assert status["details"]["exit_codes"] == {"algo-1": 0, "algo-2": 0}
    image_id = trainer_image.id  # the session's image: one ID on every target
    text = trainctl("status", run_id).stdout
    assert f"image ID: {image_id} (all of algo-1, algo-2)" in text, text  # `trainctl status` shows the image ID
    assert status["images"]["same"] == image_id and "warning" not in status["images"]
    from trainctl.run import Run

    run = Run.from_id(run_id)
    assert run.handle.local is True and run.handle.image == image and run.handle.runtime == "podman"
    assert run.handle.image_id == image_id, "the run records the image it ran"
    assert run.provenance.image == image
    summary = run.summary()
    assert summary is not None and summary["world_size"] == 2 and summary["val_accuracy"] > 0.9, summary
    assert str(summary["checkpoint"]).startswith("/opt/ml/checkpoints/"), summary
    found = run.status().progress  # the hosts' /opt/ml/model/progress.json
    assert found is not None and found.step == found.total_steps == summary["steps"], found
    assert Path(status["details"]["model_artifacts"]).is_file()
    pulled = run.pull(Path(run.paths.run_dir).parent / "pulled")  # /opt/ml/model: the final model is in it
    assert json.loads((pulled / "model.json").read_text())["model"] == "digits"
    assert (pulled / "model.safetensors").is_file() and (pulled / "summary.json").is_file()
    written = Path(run.paths.run_dir) / "algo-1" / "model" / "summary.json"
    assert written.stat().st_uid == 10001, "the image started as root and the job ran as 10001"
    names = list(run.handle.containers.values())
    assert len(names) == 2 and _containers("podman", names) == [], "the containers are removed after the run"
    print(
        f"sagemaker local=true: image {run.handle.image_id[:12]}, {took:.0f}s, val_accuracy {summary['val_accuracy']}"
    )


def _code_job(spec: Any, image: str, tmp_path: Path, name: str, script: str) -> Any:
    """A 2-host `code:` job running SCRIPT (its bundle goes into the `code` channel, not to S3)."""
    from trainctl import Job

    src = tmp_path / "src"
    src.mkdir()
    (src / "main.py").write_text(script)
    return Job.model_validate(
        spec.job_data(
            name=name,
            image=image,
            trainer=None,
            command=["python", "main.py"],
            code={"dir": str(src)},
            data={},
            resources={"nodes": 2, "gpus_per_node": 0, "procs_per_node": 1},
            sagemaker=spec.sagemaker_data(instance_type="ml.c5.xlarge"),
        )
    )


SLEEPER = "import os, time\nprint('ready on', os.environ.get('SM_CURRENT_HOST'), flush=True)\ntime.sleep(600)\n"


def test_cancel_stops_the_containers(spec: Any, aws: str, trainer_image: Any, tmp_path: Path) -> None:
    job = _code_job(spec, trainer_image.ref, tmp_path, "sleeper", SLEEPER)
    run = job.submit(target="sagemaker", local=True)
    assert run.id.startswith("sagemaker:local/sleeper-")
    lines: list[str] = []
    follower = threading.Thread(target=lambda: lines.extend(run.logs(follow=True)), daemon=True)
    follower.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and sum("ready on" in line for line in lines) < 2:
        time.sleep(0.5)
    assert run.status().state.value == "running", lines[-20:]
    assert [line for line in lines if "ready on" in line] != [], lines[-20:]
    start = time.monotonic()
    run.cancel()
    took = time.monotonic() - start
    final = run.status()
    assert final.state.value == "cancelled" and final.native_state == "Stopped", final
    follower.join(10)
    assert not follower.is_alive(), "logs --follow ends when the run ends"
    assert {line.split("]", 1)[0] for line in lines if "ready on" in line} == {"[algo-1", "[algo-2"}
    assert _containers("podman", list(run.handle.containers.values())) == []
    print(f"cancel took {took:.1f}s")


HELD = (
    "import os, time\nprint('ready on', os.environ.get('SM_CURRENT_HOST'), flush=True)\n"
    "while not os.path.exists('/opt/ml/input/release'):\n    time.sleep(0.2)\nprint('released', flush=True)\n"
    "raise SystemExit(int(open('/opt/ml/input/release').read() or 0))\n"
)
"""Waits for /opt/ml/input/release, then exits with the code written in it."""


def _state_when(run: Any, done: Any, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while not done(found := run.status()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


@pytest.mark.parametrize("code", [0, 3])
def test_a_run_whose_runner_is_killed_reads_its_containers_and_a_cancel_after_they_end_keeps_it(
    spec: Any, aws: str, trainer_image: Any, tmp_path: Path, code: int
) -> None:
    """kill -9 of the detached runner leaves the containers running, with nobody to record how they end: status
    reads them (local_engine._without_runner), and a cancel once every host has ended by itself changes nothing."""
    run = _code_job(spec, trainer_image.ref, tmp_path, "orphaned", HELD).submit(target="sagemaker", local=True)
    run_dir = Path(run.paths.run_dir)
    names = list(run.handle.containers.values())
    try:
        started = _state_when(run, lambda st: st.state.value != "queued")
        assert started.state.value == "running", started
        logs = run_dir / "logs"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(
            "ready on" in (logs / f"{host}.log").read_text(errors="replace") for host in ("algo-1", "algo-2")
        ):
            time.sleep(0.5)
        assert "ready on" in (logs / "algo-2.log").read_text(errors="replace"), "the hosts never started"
        os.kill(run.handle.pid, signal.SIGKILL)
        orphaned = _state_when(run, lambda st: "is gone" in st.reason)
        assert (orphaned.state.value, orphaned.native_state) == ("running", "InProgress/Training"), orphaned
        assert f"the runner (pid {run.handle.pid}) is gone, but algo-1, algo-2 still run" in orphaned.reason
        assert f"`trainctl cancel {run.id}` stops them" in orphaned.reason, orphaned.reason
        # both at once: torchrun's exit barrier holds a finished host for the other (elastic/agent/server/api.py)
        for host in ("algo-1", "algo-2"):
            (run_dir / host / "input" / "release").write_text(str(code))
        ended = _state_when(run, lambda st: st.state.value != "running")
        assert ended.details["exit_codes"] == {"algo-1": code, "algo-2": code}, ended
        if code == 0:
            assert (ended.state.value, ended.native_state) == ("succeeded", "Completed"), ended
            assert "every host exited 0; the model was not archived" in ended.reason, ended.reason
        else:  # the hosts' own failure line (trainer/first_failure.py), as when the runner records the end
            assert (ended.state.value, ended.native_state) == ("failed", "Failed"), ended
            assert ended.reason.endswith("recorded nothing; algo-1 exited 3, algo-2 exited 3; rank 0 on algo-1 "
                                         "failed (exit 3)"), ended.reason  # fmt: skip
        run.cancel()
        after = run.status()
        assert (after.state, after.native_state, after.reason) == (ended.state, ended.native_state, ended.reason)
        assert not (run_dir / "exit.json").exists()
    finally:
        subprocess.run(["podman", "rm", "--force", *names], capture_output=True)
        subprocess.run(["podman", "network", "rm", run.handle.network or ""], capture_output=True)


def test_missing_image_exits_1_and_records_nothing(spec: Any, aws: str, tmp_path: Path) -> None:
    sets = _sets(spec, "localhost/trainctl-no-such-image:0")
    sub = trainctl("submit", "examples/digits-sagemaker.yaml", "--target", "sagemaker", "-O", "local=true", *sets)
    assert sub.returncode == 1, sub.stderr
    assert "localhost/trainctl-no-such-image:0" in sub.stderr and "scripts/image.sh build --flavor cpu" in sub.stderr
    assert json.loads(trainctl("list", "--output", "json").stdout) == []
    runs = Path(os.environ["TRAINCTL_HOME"]) / "runs" / "sagemaker-local"
    assert not runs.exists() or list(runs.iterdir()) == []


def test_local_is_a_sagemaker_option(spec: Any, aws: str) -> None:
    other = trainctl("submit", "examples/digits.yaml", "--target", "local", "-O", "local=true")
    assert other.returncode == 2 and "'local'" in other.stderr, other.stderr
    mixed = trainctl(
        "submit", "examples/digits-sagemaker.yaml", "-t", "sagemaker", "-O", "local=true", "-O", "via=estimator"
    )
    assert mixed.returncode == 2 and "via" in mixed.stderr and "local" in mixed.stderr, mixed.stderr


def test_a_failing_host_fails_the_run_with_its_failure_line(
    spec: Any, aws: str, trainer_image: Any, tmp_path: Path
) -> None:
    script = "import sys\nprint('about to fail', flush=True)\nsys.exit(3)\n"
    run = _code_job(spec, trainer_image.ref, tmp_path, "failing", script).submit(target="sagemaker", local=True)
    lines = list(run.logs(follow=True))
    final = run.status()
    assert final.state.value == "failed" and final.native_state == "Failed", (final, lines[-20:])
    assert final.details["exit_codes"] == {"algo-1": 3, "algo-2": 3}
    failure = (Path(run.paths.run_dir) / "algo-1" / "output" / "failure").read_text().strip()
    # the launcher's first failing rank (trainer/first_failure.py): its headline, then its last lines
    assert final.reason == failure.splitlines()[0] == "rank 0 on algo-1 failed (exit 3)", (final.reason, failure)
    assert "about to fail" in failure and final.log_tail[-1] == "about to fail", (final, failure)
    (attempt,) = final.attempts  # classified from the failure line and the hosts' exit codes (sagemaker/causes.py)
    assert (attempt.cause.value if attempt.cause else None, attempt.exit_code) == ("application_error", 3), attempt
    assert any(line.startswith("[algo-2] ") and "about to fail" in line for line in lines), lines[-20:]


def test_max_runtime_stops_the_job(spec: Any, aws: str, trainer_image: Any, tmp_path: Path) -> None:
    """StoppingCondition.MaxRuntimeInSeconds: SIGTERM to every host when it passes, as SageMaker does."""
    job = _code_job(spec, trainer_image.ref, tmp_path, "slow", SLEEPER)
    run = job.with_overrides(["max_runtime=10s"]).submit(target="sagemaker", local=True)
    lines = list(run.logs(follow=True))
    final = run.status()
    assert final.state.value == "failed" and final.native_state == "Stopped/MaxRuntimeExceeded", (final, lines[-9:])
    assert final.reason == "MaxRuntimeExceeded: 10s", final
    assert sum("ready on" in line for line in lines) == 2, lines[-20:]
    assert _containers("podman", list(run.handle.containers.values())) == []


def test_local_mode_takes_local_paths_and_file_uris_for_data(spec: Any, aws: str, trainer_image: Any) -> None:
    """Issue 27 finding 14: -O local=true reads data from this machine (a path relative to the job file, a file://
    URI) as the SDK's local mode does. For AWS the same paths are no longer refused: submit uploads them once
    (issue 35 section 3, tests/sagemaker/test_data_upload.py)."""
    val = REPO / "examples" / "data" / "digits" / "val.jsonl"
    sets = [
        *_sets(spec, trainer_image.ref),
        "--set",
        "data.train=data/digits/train.jsonl",
        "--set",
        f"data.val=file://{val}",
    ]
    local_data = ["--set", "data.train=data/digits/train.jsonl", "--set", f"data.val=file://{val}"]
    aws = trainctl(
        "validate", "examples/digits-sagemaker.yaml", "-t", "sagemaker", *local_data
    )  # the example's ECR image
    assert aws.returncode == 0, aws.stderr
    missing = trainctl(
        "validate", "examples/digits-sagemaker.yaml", "-t", "sagemaker", "-O", "local=true", *sets,
        "--set", "data.train=data/nothere.jsonl",
    )  # fmt: skip
    assert missing.returncode == 2 and "data.train:" in missing.stderr and "nothere" in missing.stderr
    ok = trainctl("validate", "examples/digits-sagemaker.yaml", "-t", "sagemaker", "-O", "local=true", *sets)
    assert ok.returncode == 0, ok.stderr
    sub = trainctl("submit", "examples/digits-sagemaker.yaml", "-t", "sagemaker", "-O", "local=true", *sets)
    assert sub.returncode == 0, sub.stderr
    run_id = sub.stdout.split("submitted ", 1)[1].split()[0]
    follow = trainctl("logs", run_id, "--follow", timeout=600)
    status = json.loads(trainctl("status", run_id, "--output", "json").stdout)
    assert status["state"] == "succeeded", (status, follow.stdout.splitlines()[-30:])
    from trainctl.run import Run

    run = Run.from_id(run_id)
    channels = Path(run.paths.run_dir) / "algo-1" / "input" / "data"
    assert (channels / "train" / "train.jsonl").is_file() and (channels / "val" / "val.jsonl").is_file()
    summary = run.summary()
    assert summary is not None and summary["val_accuracy"] > 0.9, summary


def _ddp_sum(scale: float) -> dict[str, float]:
    """Every rank's value: the sum over ranks of rank + 1, times `scale` (a DDP all-reduce with gloo)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    out = {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": total.item() * scale}
    dist.barrier()
    dist.destroy_process_group()
    return out


def test_a_function_runs_in_the_image_on_two_containers(spec: Any, aws: str, trainer_image: Any) -> None:
    """Issue 36 on SageMaker local mode: the image's own cloudpickle unpickles the payload from the code
    channel on two hosts, 2 processes each, and every rank's value comes back from their /opt/ml/model."""
    import cloudpickle
    from trainctl import Job

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test module does not travel: by value
    sagemaker = spec.sagemaker_data(instance_type="ml.c5.xlarge")
    job = Job(name="fn-local", image=trainer_image.ref, resources={"nodes": 2, "procs_per_node": 2, "gpus_per_node": 0},
              sagemaker=sagemaker)  # type: ignore[arg-type]  # fmt: skip
    run = job.with_function(_ddp_sum, 0.5).submit("sagemaker", local=True)
    found = run.results(timeout=600)
    assert found == [{"rank": r, "world": 4, "sum": 5.0} for r in range(4)], (found, "\n".join(run.logs())[-3000:])
    assert run.result() == found[0]
