"""GPUs that would sit idle or are not there are said before the run, and loudly in it (issue 27 finding 2).

`gpus_per_node: 3` with `procs_per_node: 2` reserves a GPU per node that no process uses (a warning from
validate, render and submit on every target); a local job asking for GPUs on a machine that shows none still
runs, on CPU with gloo, and now says so before it starts and in its log (the launcher's WARNING line).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_cli import cli_says  # tests/support
from trainctl import Job
from trainctl.targets.local.inputs import gpu_shortfall, visible_gpus
from trainer.launcher.launch_plan import gpu_warning

IDLE = "gpus_per_node=3 but procs_per_node=2: each node reserves 3 GPUs and 1 of them sit idle"


@pytest.mark.parametrize("target", ["slurm", "kubernetes"])
@pytest.mark.parametrize("command", ["validate", "render"])
def test_gpus_no_process_uses_are_a_warning_on_every_target(digits_job_file: Path, target: str, command: str) -> None:
    sets = ["--set", "resources.gpus_per_node=3", "--set", "resources.procs_per_node=2"]
    code, _, err = cli_says(command, str(digits_job_file), "-t", target, *sets)
    assert code == 0 and f"warning: resources: {IDLE}" in err, err
    assert "set procs_per_node: 3 to use them, or gpus_per_node: 2" in err
    code, _, err = cli_says(command, str(digits_job_file), "-t", target, "--set", "resources.gpus_per_node=2")
    assert code == 0 and "warning" not in err, err  # procs_per_node 2 on 2 GPUs: nothing idle


def test_idle_gpus_in_json_and_from_the_python_api(digits_job_file: Path) -> None:
    sets = ["--set", "resources.gpus_per_node=3", "--set", "resources.procs_per_node=2"]
    code, out, _ = cli_says("validate", str(digits_job_file), "-t", "slurm", *sets, "--output", "json")
    assert code == 0 and any(IDLE in w for w in json.loads(out)["warnings"])
    job = Job.from_yaml(digits_job_file, ["resources.gpus_per_node=3", "resources.procs_per_node=2"])
    assert any(IDLE in w for w in job.check("slurm"))
    resources = {"gpus_per_node": 3, "procs_per_node": 2}
    per_node = Job(name="p", launch="per_node", command=["torchrun", "t.py"], resources=resources)
    assert not [w for w in per_node.check("kubernetes") if "idle" in w]  # its own launcher uses what it likes


def test_the_gpus_this_machine_shows(tmp_path: Path) -> None:
    driver = tmp_path / "gpus"
    for bus in ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0"):
        (driver / bus).mkdir(parents=True)
    assert visible_gpus({}, driver) == 3
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,2"}, driver) == 2
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, driver) == 0
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, driver) == 0
    assert visible_gpus({}, tmp_path / "no-driver") == 0


def test_a_local_job_asking_for_more_gpus_than_shown_is_told_before_it_runs() -> None:
    job = Job(name="g", command=["python", "t.py"], resources={"gpus_per_node": 2})
    (zero,) = gpu_shortfall(job, shown=0)
    assert "gpus_per_node=2, but this machine shows 0 GPU(s)" in zero and "trains on CPU with gloo" in zero
    (one,) = gpu_shortfall(job, shown=1)
    assert "its 2 processes share them" in one
    assert gpu_shortfall(job, shown=2) == [] and gpu_shortfall(Job(name="c", command=["python", "t.py"])) == []


def test_the_launchers_warning() -> None:
    asked = {"TRAINCTL_GPUS_PER_NODE": "2"}
    assert gpu_warning(asked, lambda: 0, 2) == (
        "WARNING: the job asks for 2 GPU(s) per node and this node shows 0: training runs on CPU with gloo"
    )
    assert "the 2 process(es) share them" in str(gpu_warning(asked, lambda: 1, 2))
    assert gpu_warning(asked, lambda: 2, 2) is None

    def never() -> int:
        raise AssertionError("torch imported for a job that asked for no GPU")

    assert gpu_warning({}, never, 1) is None


@pytest.mark.skipif(visible_gpus() > 0, reason="the CPU fallback needs a machine without GPUs")
def test_a_real_local_run_on_a_machine_without_gpus_says_it_trains_on_cpu(
    digits_job_file: Path, trainctl_home: Path
) -> None:
    sets = ["--set", "resources.gpus_per_node=1", "--set", "resources.procs_per_node=1", "--set", "trainer.epochs=1"]
    code, out, err = cli_says("submit", str(digits_job_file), *sets, "--wait")
    assert code == 0, out + err
    assert "warning: resources.gpus_per_node=1, but this machine shows 0 GPU(s)" in err
    (log,) = (trainctl_home / "runs").glob("*/log.txt")
    text = log.read_text()
    warning = "trainer-launch: WARNING: the job asks for 1 GPU(s) per node and this node shows 0: training runs on CPU"
    assert warning in text and text.index(warning) < text.index("[rank0]")  # before the first line of training


@pytest.mark.parametrize(
    ("target", "shown", "sets", "line"),
    [
        ("local", 0, ["resources.gpus_per_node=2"], "world size 2, gloo (this machine shows no GPU)"),
        ("local", 2, ["resources.gpus_per_node=2"], "world size 2, nccl"),
        ("slurm", 0, ["resources.gpus_per_node=2"], "world size 2, nccl"),  # the cluster's nodes have them
        ("local", 2, ["resources.gpus_per_node=2", "trainer.backend=gloo"], "world size 2, gloo"),
        ("local", 0, [], "world size 2, gloo"),
    ],
)
def test_validates_line_names_the_backend_its_warning_names(
    digits_job_file: Path, monkeypatch: pytest.MonkeyPatch, target: str, shown: int, sets: list[str], line: str
) -> None:
    """Issue 37: `world size 2, nccl` stood beside validate's own warning that the run trains on CPU with gloo."""
    from trainctl.targets.local.target import LocalTarget

    monkeypatch.setattr(LocalTarget, "gpus_shown", lambda self: shown)
    code, out, err = cli_says("validate", str(digits_job_file), "-t", target, *(a for s in sets for a in ("--set", s)))
    assert code == 0 and out.rstrip().endswith(line), out + err
    assert ("trains on CPU with gloo" in err) == ("no GPU" in line)


def test_an_explicit_nccl_on_a_machine_without_gpus_is_not_said_to_train_on_gloo() -> None:
    job = Job(name="g", trainer={"backend": "nccl"}, data={"train": "/d/t.jsonl"}, resources={"gpus_per_node": 1})
    (said,) = gpu_shortfall(job, shown=0)
    assert "trains on CPU with gloo" not in said and "its trainer stops at once (trainer.backend: nccl needs" in said
