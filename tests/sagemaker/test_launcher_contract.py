"""What the image does with our request: SageMaker's files under a tmp root, the image's `train` script, dry run.

`docker run IMAGE` with ContainerEntrypoint ["train"] + ContainerArguments, minus the container: the
trainer's own launcher reads hyperparameters.json written from our request (docs/contracts.md section 1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from trainctl.job import Job
from trainctl.submit.bundle import prepare
from trainctl.targets.program import as_flags, trainer_settings
from trainctl.targets.sagemaker.render import render
from trainctl.targets.sagemaker.request import CHECKPOINT_DIR, MODEL_DIR, data_paths

REPO = Path(__file__).resolve().parents[2]


def _dry_run(request: dict[str, Any], root: Path, host: str = "algo-2") -> dict[str, Any]:
    config = root / "opt/ml/input/config"
    config.mkdir(parents=True)
    hosts = [f"algo-{i + 1}" for i in range(request["ResourceConfig"]["InstanceCount"])]
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": host, "hosts": hosts}))
    (config / "hyperparameters.json").write_text(json.dumps(request["HyperParameters"]))
    channels = {c["ChannelName"]: {"S3DistributionType": "FullyReplicated"} for c in request.get("InputDataConfig", [])}
    (config / "inputdataconfig.json").write_text(json.dumps(channels))
    alg = request["AlgorithmSpecification"]
    assert alg["ContainerEntrypoint"] == ["train"]
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "trainer-launch").exists():
        pytest.skip("the trainer package (trainer-launch) is not installed in this environment")
    env = {**os.environ, "TRAINER_SAGEMAKER_ROOT": str(root), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    argv = ["sh", str(REPO / "trainer_image/bin/train"), *alg["ContainerArguments"], "--dry-run"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    plan: dict[str, Any] = json.loads(done.stdout)
    return plan


def test_trainer_job_runs_the_same_trainer_flags(tmp_path: Path) -> None:
    job = prepare(Job.from_yaml(REPO / "examples/digits-sagemaker.yaml"))
    plan = _dry_run(render(job).native, tmp_path)
    settings = trainer_settings(job, data_paths=data_paths(job), checkpoint_dir=CHECKPOINT_DIR, output_dir=MODEL_DIR)
    program = plan["program"]
    assert program[1:3] == ["-m", "trainer.train"]
    assert program[3:] == as_flags(dict(sorted(settings.items())))
    assert plan["platform"] == "sagemaker" and plan["nproc_per_node"] == 1
    assert plan["node_rank"] == 1 and plan["master_addr"] == "algo-1" and plan["nnodes"] == "2"
    assert plan["env"]["TRAINER_DATA_TRAIN"] == str(tmp_path / "opt/ml/input/data/train")


def test_source_dir_job_runs_its_script(spec: Any, tmp_path: Path) -> None:
    data = spec.job_data(
        "script",
        trainer=None,
        command=["python", "train.py", "--epochs", "3", "--run-name", "demo"],
        resources={"nodes": 1, "gpus_per_node": 4, "procs_per_node": 4, "max_restarts": 2},
        sagemaker=spec.sagemaker_data(instance_type="ml.g5.12xlarge", source_dir="src"),
    )
    plan = _dry_run(render(prepare(Job.parse(data))).native, tmp_path, host="algo-1")
    assert plan["program"][1:] == ["train.py", "--epochs", "3", "--run-name", "demo"]
    assert plan["nproc_per_node"] == 4 and plan["max_restarts"] == 2
    assert plan["cwd"] == str(tmp_path / "opt/ml/code")
    assert plan["unpack"] == [
        [str(tmp_path / "opt/ml/input/data/code/sourcedir.tar.gz"), str(tmp_path / "opt/ml/code")]
    ]


def test_command_job_runs_its_argv(spec: Any, tmp_path: Path) -> None:
    data = spec.job_data("cmd", trainer=None, command=["python", "-m", "mypkg.train", "--x", "1"])
    plan = _dry_run(render(prepare(Job.parse(data))).native, tmp_path)
    assert plan["program"] == ["python", "-m", "mypkg.train", "--x", "1"]
