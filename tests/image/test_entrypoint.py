"""The image's entrypoint command, run outside a container on this machine.

The image runs `trainer-launch` (its ENTRYPOINT) and, on SageMaker, `train`; both are the
trainer package's real console script here, started from the project venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from trainer.launcher.platforms import without_platform


def clean_env() -> dict[str, str]:
    """This process's environment minus anything that would make the launcher see a platform."""
    return {k: v for k, v in without_platform(os.environ).items() if not k.startswith("TRAINER_")}


@pytest.fixture(scope="module")
def launcher(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A directory holding `trainer-launch`, and the environment to run it with.

    The venv's console script when the trainer package is installed there; otherwise the same
    script pip would generate, run against trainer_image/ on PYTHONPATH.
    """
    env = clean_env()
    installed = Path(sys.executable).parent / "trainer-launch"
    if installed.exists():
        return installed.parent, env
    if not (repo / "trainer_image/trainer/launch.py").exists():
        pytest.skip("trainer_image/trainer/launch.py does not exist yet (the trainer is being written)")
    bin_dir = tmp_path_factory.mktemp("bin")
    script = bin_dir / "trainer-launch"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom trainer.launch import main\nsys.exit(main())\n")
    script.chmod(0o755)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo / "trainer_image"), env.get("PYTHONPATH")]))
    return bin_dir, env


def run(argv: list[str], env: dict[str, str], bin_dir: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(env)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_entrypoint_dry_run(launcher: tuple[Path, dict[str, str]], tmp_path: Path, dockerfile: Any) -> None:
    """`docker run IMAGE --dry-run -- python -m trainer.train --help`, minus the container."""
    import ast

    entry = ast.literal_eval(dockerfile.final.values("ENTRYPOINT")[-1])
    argv = [*entry, "--dry-run", "--", "python", "-m", "trainer.train", "--help"]
    done = run(argv, launcher[1], launcher[0], tmp_path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["platform"] == "local"
    assert plan["mode"] == "torchrun"
    assert plan["program"] == ["python", "-m", "trainer.train", "--help"]
    assert plan["torchrun_args"][-5:] == ["--no-python", "python", "-m", "trainer.train", "--help"]


def test_the_planned_program_runs(launcher: tuple[Path, dict[str, str]], tmp_path: Path, repo: Path) -> None:
    """What the plan would start: `python -m trainer.train --help` prints the contract's flags."""
    if not (repo / "trainer_image/trainer/train.py").exists():
        pytest.skip("trainer_image/trainer/train.py does not exist yet (the training loop is being written)")
    done = run([sys.executable, "-m", "trainer.train", "--help"], launcher[1], launcher[0], tmp_path)
    assert done.returncode == 0, done.stderr
    for flag in ("--train-data", "--batch-size", "--checkpoint-dir", "--precision"):
        assert flag in done.stdout


def _sagemaker_root(root: Path) -> Path:
    config = root / "opt/ml/input/config"
    config.mkdir(parents=True)
    (config / "resourceconfig.json").write_text(
        json.dumps({"current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": "eth0"})
    )
    (config / "hyperparameters.json").write_text(
        json.dumps({"epochs": "2", "model": '"digits"', "sagemaker_region": '"us-east-1"'})
    )
    (config / "inputdataconfig.json").write_text(json.dumps({"train": {"TrainingInputMode": "File"}}))
    (root / "opt/ml/input/data/train").mkdir(parents=True)
    return root


def test_sagemaker_train_executable_dry_run(launcher: tuple[Path, dict[str, str]], tmp_path: Path, repo: Path) -> None:
    """`train --dry-run` (the image's SageMaker executable) reads a SageMaker layout under a fake root."""
    root = _sagemaker_root(tmp_path / "sm")
    env = dict(launcher[1], TRAINER_SAGEMAKER_ROOT=str(root), SM_NUM_GPUS="0")
    done = run([str(repo / "trainer_image/bin/train"), "--dry-run"], env, launcher[0], tmp_path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["platform"] == "sagemaker"
    program = plan["program"]
    assert program[1:3] == ["-m", "trainer.train"]
    # Hyperparameters become the training loop's flags; sagemaker_* ones stay out.
    flags = dict(zip(program[3::2], program[4::2], strict=True))
    assert flags == {"--epochs": "2", "--model": "digits"}
    assert plan["env"]["TRAINER_CHECKPOINT_DIR"] == str(root / "opt/ml/checkpoints")
    assert plan["env"]["TRAINER_OUTPUT_DIR"] == str(root / "opt/ml/model")
    assert plan["env"]["TRAINER_DATA_TRAIN"] == str(root / "opt/ml/input/data/train")
    assert plan["failure_file"] == str(root / "opt/ml/output/failure")


def test_sagemaker_start_command_reaches_the_launcher(
    launcher: tuple[Path, dict[str, str]], dockerfile: Any, tmp_path: Path
) -> None:
    """ENTRYPOINT + ["train"], as SageMaker runs it, must be a valid launcher command line."""
    import ast

    entry = ast.literal_eval(dockerfile.final.values("ENTRYPOINT")[-1])
    code = (
        "import sys; from trainer.launch import parse; "
        f"opts, dry = parse({[*entry[1:], 'train']!r}); "
        "sys.exit(0 if opts.program == [] and not dry else 3)"
    )
    done = run([sys.executable, "-c", code], launcher[1], launcher[0], tmp_path)
    assert done.returncode == 0, done.stderr
