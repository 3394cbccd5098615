"""The launcher: environment -> plan for every platform (pure), and its side effects as processes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from trainer.errors import TrainerInputError
from trainer.launch import parse, wait_for_master
from trainer.launcher.hostlist import expand_hostlist
from trainer.launcher.launch_plan import FORWARDED_SIGNALS
from trainer.launcher.platforms import LaunchOptions, is_platform_variable, plan_from_env
from trainer.launcher.sagemaker import files as sm

from .conftest import PY, clean_env, launch_cmd

PROG = ["python", "-m", "trainer.train", "--epochs", "1"]


def opts(**kw: Any) -> LaunchOptions:
    return LaunchOptions(program=list(PROG), **kw)


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node[01-03,7],gpu-a[1-2]", ["node01", "node02", "node03", "node7", "gpu-a1", "gpu-a2"]),
        ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
        ("single-host", ["single-host"]),
        ("a,b,c", ["a", "b", "c"]),
        ("r[1-2]-n[08-10]", ["r1-n08", "r1-n09", "r1-n10", "r2-n08", "r2-n09", "r2-n10"]),
        ("x[9-11]", ["x9", "x10", "x11"]),
    ],
)
def test_hostlist(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("bad", ["node[1-", "node]1[", "n[3-1]", "n[a-b]"])
def test_bad_hostlist(bad: str) -> None:
    with pytest.raises(TrainerInputError, match="hostlist"):
        expand_hostlist(bad)


def test_local_defaults(tmp_path: Path) -> None:
    plan = plan_from_env({}, opts(), root=tmp_path)
    assert (plan.platform, plan.mode, plan.nnodes, plan.nproc_per_node, plan.standalone) == (
        "local", "torchrun", "1", 1, True,
    )  # fmt: skip
    assert plan.wait_for is None
    assert plan.torchrun_args() == [
        "--nproc-per-node=1", "--max-restarts=0", f"--signals-to-handle={FORWARDED_SIGNALS}",
        "--standalone", "--nnodes=1", "--no-python", *PROG,
    ]  # fmt: skip
    assert plan_from_env({}, opts(), root=tmp_path, gpus_visible=4).nproc_per_node == 4
    assert plan_from_env({}, opts(nproc_per_node=2), root=tmp_path, gpus_visible=4).nproc_per_node == 2


def test_slurm_multi_node_odd_hostlist(tmp_path: Path) -> None:
    env = {
        "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[01-03,7],gpu-a[1-2]",
        "SLURM_NNODES": "6", "SLURM_NODEID": "4",
    }  # fmt: skip
    plan = plan_from_env(env, opts(max_restarts=2), root=tmp_path, gpus_visible=8)
    assert (plan.platform, plan.nnodes, plan.node_rank, plan.master_addr) == ("slurm", "6", 4, "node01")
    assert (plan.rdzv_backend, plan.rdzv_id, plan.nproc_per_node) == ("static", "4242", 8)
    assert plan.wait_for == ("node01", 29500)
    assert plan.torchrun_args()[:8] == [
        "--nproc-per-node=8", "--max-restarts=2", f"--signals-to-handle={FORWARDED_SIGNALS}", "--nnodes=6", "--node-rank=4",
        "--master-addr=node01", "--master-port=29500", "--rdzv-id=4242",
    ]  # fmt: skip


def test_slurm_suffix_hostlist_and_elastic(tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-2]-ib", "SLURM_NODEID": "1"}
    plan = plan_from_env(env, opts(nnodes="1:2", master_port=30000), root=tmp_path)
    assert (plan.nnodes, plan.rdzv_backend, plan.rdzv_endpoint) == ("1:2", "c10d", "n1-ib:30000")
    assert plan.node_rank is None and plan.wait_for == ("n1-ib", 30000)
    assert "--rdzv-id=9" in plan.torchrun_args()


def test_slurm_single_host_is_standalone(tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "gpu-node-17", "SLURM_NNODES": "1", "SLURM_NODEID": "0"}
    plan = plan_from_env(env, opts(nproc_per_node=2), root=tmp_path)
    assert plan.platform == "slurm" and plan.standalone and plan.wait_for is None


def test_kubeflow_pet_static(tmp_path: Path) -> None:
    env = {
        "PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "job-master-0",
        "PET_MASTER_PORT": "23456", "PET_NPROC_PER_NODE": "4",
    }  # fmt: skip
    plan = plan_from_env(env, opts(), root=tmp_path)
    assert (plan.platform, plan.nnodes, plan.node_rank, plan.nproc_per_node) == ("kubeflow", "2", 1, 4)
    assert plan.wait_for == ("job-master-0", 23456) and plan.rdzv_backend == "static"
    # the job's value wins over the platform's
    assert plan_from_env(env, opts(nproc_per_node=1), root=tmp_path).nproc_per_node == 1


def test_kubeflow_elastic(tmp_path: Path) -> None:
    env = {
        "PET_NNODES": "1:3", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "job-worker-0:29400",
        "PET_RDZV_ID": "job-abc", "PET_NPROC_PER_NODE": "2",
    }  # fmt: skip
    plan = plan_from_env(env, opts(), root=tmp_path)
    assert (plan.nnodes, plan.rdzv_backend, plan.rdzv_endpoint, plan.rdzv_id) == (
        "1:3", "c10d", "job-worker-0:29400", "job-abc",
    )  # fmt: skip
    assert plan.wait_for == ("job-worker-0", 29400)
    args = plan.torchrun_args()
    assert "--rdzv-endpoint=job-worker-0:29400" in args and "--nnodes=1:3" in args


def test_kubeflow_plain_operator_env(tmp_path: Path) -> None:
    env = {"MASTER_ADDR": "pj-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "3", "RANK": "2"}
    plan = plan_from_env(env, opts(), root=tmp_path)
    assert (plan.platform, plan.nnodes, plan.node_rank, plan.master_addr, plan.master_port) == (
        "kubeflow", "3", 2, "pj-master-0", 23456,
    )  # fmt: skip


def test_already_under_torchrun_runs_program_directly(tmp_path: Path) -> None:
    env = {"LOCAL_RANK": "0", "RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "x", "TORCHELASTIC_RUN_ID": "r"}
    plan = plan_from_env(env, opts(), root=tmp_path)
    assert (plan.platform, plan.mode, plan.program) == ("torchrun", "direct", PROG)


def _sagemaker_root(root: Path, hosts: list[str], current: str, hp: dict[str, str]) -> Path:
    cfg = root / "opt/ml/input/config"
    cfg.mkdir(parents=True)
    (cfg / "resourceconfig.json").write_text(json.dumps({"current_host": current, "hosts": hosts}))
    (cfg / "hyperparameters.json").write_text(json.dumps(hp))
    for channel in ("train", "val"):
        (root / "opt/ml/input/data" / channel).mkdir(parents=True)
    return root


def test_sagemaker_hyperparameters_become_trainer_flags(tmp_path: Path) -> None:
    hp = {
        "epochs": "3", "model": '"digits"', "model_args": '{"channels": 8}', "streaming": "true",
        "train_data": '"${TRAINER_DATA_TRAIN}"', "sagemaker_region": '"us-east-1"', "lr": "0.01",
    }  # fmt: skip
    # SageMaker lists hosts sorted; the toolkit (and so the launcher) takes them in the file's order
    root = _sagemaker_root(tmp_path, ["algo-1", "algo-2"], "algo-2", hp)
    plan = plan_from_env({"SM_NUM_GPUS": "0"}, LaunchOptions(), root=root, python="PY")
    assert (plan.platform, plan.nnodes, plan.node_rank, plan.master_addr, plan.nproc_per_node) == (
        "sagemaker", "2", 1, "algo-1", 1,
    )  # fmt: skip
    assert plan.program == [
        "PY", "-m", "trainer.train", "--epochs", "3", "--lr", "0.01", "--model", "digits",
        "--model-args", '{"channels":8}', "--streaming", "true", "--train-data", "${TRAINER_DATA_TRAIN}",
    ]  # fmt: skip
    assert {k: v for k, v in plan.env.items() if k.startswith("TRAINER_")} == {
        "TRAINER_CHECKPOINT_DIR": str(root / "opt/ml/checkpoints"),
        "TRAINER_OUTPUT_DIR": str(root / "opt/ml/model"),
        "TRAINER_DATA_TRAIN": str(root / "opt/ml/input/data/train"),
        "TRAINER_DATA_VAL": str(root / "opt/ml/input/data/val"),
    }
    assert plan.failure_file == str(root / "opt/ml/output/failure")
    assert plan.wait_for == ("algo-1", 29500)
    assert plan_from_env({"SM_NUM_GPUS": "4"}, LaunchOptions(), root=root).nproc_per_node == 4


def test_sagemaker_command_and_program(tmp_path: Path) -> None:
    cmd = ["python", "-m", "trainer.train", "--epochs", "2"]
    root = _sagemaker_root(tmp_path / "a", ["algo-1"], "algo-1", {"trainctl_command": json.dumps(cmd)})
    plan = plan_from_env({}, LaunchOptions(), root=root)
    assert plan.program == cmd and plan.standalone and plan.unpack == []
    hp = {
        "sagemaker_program": '"train.py"',
        "sagemaker_submit_directory": '"s3://b/sourcedir.tar.gz"',
        "lr": "0.1",
    }
    root = _sagemaker_root(tmp_path / "b", ["algo-1"], "algo-1", hp)
    plan = plan_from_env({}, LaunchOptions(), root=root, python="PY")
    assert plan.program == ["PY", "train.py", "--lr", "0.1"]
    assert plan.unpack == [(str(root / "opt/ml/input/data/code/sourcedir.tar.gz"), str(root / "opt/ml/code"))]
    assert plan.cwd == str(root / "opt/ml/code")
    # an explicit PROGRAM wins over the hyperparameters
    assert plan_from_env({}, opts(), root=root).program == PROG


def test_missing_program_and_bad_options(tmp_path: Path) -> None:
    with pytest.raises(TrainerInputError, match="PROGRAM"):
        plan_from_env({}, LaunchOptions(), root=tmp_path)
    with pytest.raises(TrainerInputError, match="--nnodes"):
        parse(["--nnodes", "two", "--", "x"])
    o, dry = parse(["--nproc-per-node", "2", "--max-restarts", "1", "--dry-run", "--", "prog", "--flag", "v"])
    assert (o.nproc_per_node, o.max_restarts, o.program, dry) == (2, 1, ["prog", "--flag", "v"], True)


def test_master_wait_is_bounded_and_names_host_and_port() -> None:
    calls: list[str] = []

    def never(host: str, port: int) -> None:
        calls.append(host)
        raise OSError("Name or service not known")

    with pytest.raises(TimeoutError, match=r"job-master-0:23456 did not resolve within 1s"):
        wait_for_master("job-master-0", 23456, 1.0, resolve=never)
    assert len(calls) >= 2  # it retried
    attempts = iter([OSError("not yet"), OSError("not yet"), None])

    def later(host: str, port: int) -> None:
        err = next(attempts)
        if err:
            raise err

    wait_for_master("job-master-0", 23456, 10.0, resolve=later)


def test_dry_run_prints_plan_json(tmp_path: Path) -> None:
    env = clean_env(tmp_path, SLURM_JOB_ID="5", SLURM_JOB_NODELIST="node[01-02]", SLURM_NODEID="1")
    out = subprocess.run(
        launch_cmd("--nproc-per-node", "2", "--dry-run", "--", "python", "-m", "trainer.train"),
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    plan = json.loads(out.stdout)
    assert plan["platform"] == "slurm" and plan["node_rank"] == 1 and plan["master_addr"] == "node01"
    # each worker first makes SLURM's task variables agree with its rank (trainer/slurm_worker.py)
    worker = [PY, "-m", "trainer.slurm_worker", "--"]
    assert plan["torchrun_args"][-8:] == ["--no-python", *worker, "python", "-m", "trainer.train"]


def test_platform_local_ignores_every_platform(tmp_path: Path) -> None:
    """`--platform local` (the SDK's local target): one node here, whatever the caller's environment says."""
    (tmp_path / sm.RESOURCE_CONFIG).parent.mkdir(parents=True)
    (tmp_path / sm.RESOURCE_CONFIG).write_text(json.dumps({"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}))
    callers = [
        {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_NODEID": "1"},
        {"PET_NNODES": "2", "PET_MASTER_ADDR": "m", "PET_NODE_RANK": "1"},
        {"MASTER_ADDR": "m", "WORLD_SIZE": "4", "RANK": "3"},
        {"LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "x"},
        {},  # and SageMaker's resourceconfig.json under root
    ]
    for env in callers:
        assert plan_from_env(env, opts(), root=tmp_path).platform != "local"
        plan = plan_from_env(env, opts(platform="local"), root=tmp_path)
        assert (plan.platform, plan.nnodes, plan.standalone) == ("local", "1", True), env
    assert parse(["--platform", "local", "--", "p"])[0].platform == "local"
    with pytest.raises(SystemExit):
        parse(["--platform", "slurm", "--", "p"])


def test_platform_local_hides_the_callers_platform_from_workers(tmp_path: Path) -> None:
    """Inside a SLURM job and a pod at once, a local launch's workers see none of their variables."""
    caller = {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "node[01-02]", "PET_NNODES": "2", "NODE_RANK": "1"}
    show = "import json, os; print('ENV', json.dumps(sorted(k for k in os.environ if k.startswith(('SLURM_', 'PET_')) or k == 'NODE_RANK')))"
    out = subprocess.run(
        launch_cmd("--platform", "local", "--nproc-per-node", "1", "--", PY, "-c", show),
        env=clean_env(tmp_path, **caller), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "platform local: 1 node(s)" in out.stderr
    assert [line for line in out.stdout.splitlines() if "ENV" in line] == ["[rank0] ENV []"]  # with its rank prefix
    assert {k for k in caller if is_platform_variable(k)} == set(caller)  # all of them are on the one list


def test_direct_exec_under_torchrun(tmp_path: Path) -> None:
    env = clean_env(tmp_path, LOCAL_RANK="0", TORCHELASTIC_RUN_ID="x")
    out = subprocess.run(
        launch_cmd("--", PY, "-c", "import os; print('direct', os.getpid())"),
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and out.stdout.startswith("direct")


@pytest.mark.parametrize(("mode", "program", "said"), [
    ("torchrun", "no-such-program", "no-such-program: no such program (PATH="),
    ("direct", "no-such-program", "no-such-program: no such program (PATH="),
    ("torchrun", "./train.sh", "./train.sh: not executable (chmod +x it"),
])  # fmt: skip
def test_a_program_that_cannot_run_is_bad_input_before_anything_starts(
    tmp_path: Path, mode: str, program: str, said: str
) -> None:
    """As runc looks a container's command up before it starts it: a program that is not there, or not executable,
    is exit 2 (invalid, never retried) with its name, in torchrun's mode too, where torchrun's workers would
    have failed with exit 1 (an application error, retried)."""
    (tmp_path / "train.sh").write_text("#!/bin/sh\necho never\n")
    under = {"LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "x"} if mode == "direct" else {}
    env = clean_env(tmp_path, TRAINER_OUTPUT_DIR=str(tmp_path / "out"), **under)
    out = subprocess.run(launch_cmd("--nproc-per-node", "2", "--", program, "--flag"), env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2 and said in out.stderr + out.stdout, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and "never" not in out.stdout
    record = json.loads((tmp_path / "out" / "failure.json").read_text())
    assert said in record["message"], record


def test_sagemaker_code_tarball_and_failure_file(tmp_path: Path) -> None:
    """A real launch: unpack the `code` channel, run the script under torchrun, record the failure."""
    hp = {"sagemaker_program": '"train.py"', "exit_with": "3"}
    root = _sagemaker_root(tmp_path / "sm", ["algo-1"], "algo-1", hp)
    script = (
        b"import os, sys\n"
        b"print('script ran in', os.getcwd(), os.environ['TRAINER_DATA_TRAIN'], sys.argv[1:])\n"
        b"sys.exit(int(sys.argv[2]))\n"
    )
    code = root / "opt/ml/input/data/code"
    code.mkdir(parents=True)
    with tarfile.open(code / "sourcedir.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = len(script)
        tar.addfile(info, io.BytesIO(script))
    env = clean_env(tmp_path, TRAINER_SAGEMAKER_ROOT=str(root), SM_NUM_GPUS="0")
    out = subprocess.run([PY, "-m", "trainer.launch"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 3, out.stderr[-2000:]
    assert f"script ran in {root / 'opt/ml/code'} {root / 'opt/ml/input/data/train'}" in out.stdout
    assert "['--exit_with', '3']" in out.stdout  # the toolkit's form: keys as written
    failure = (root / "opt/ml/output/failure").read_text()
    assert failure.startswith("rank 0 on algo-1 failed (exit 3)\nlast lines of rank 0:\nscript ran in "), failure
    assert sys.executable == PY


@pytest.mark.parametrize("where", ['"/opt/ml/code"', '"file:///opt/ml/code"'])
def test_sagemaker_local_code_folder_is_used_as_it_is(tmp_path: Path, where: str) -> None:
    """The SDK's local mode with local_code: the code is a folder at /opt/ml/code, the code channel empty."""
    hp = {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": where}
    root = _sagemaker_root(tmp_path / "sm", ["algo-1"], "algo-1", hp)
    (root / "opt/ml/code").mkdir(parents=True)
    (root / "opt/ml/code/train.py").write_text("import os\nprint('local code ran in', os.getcwd())\n")
    plan = plan_from_env({}, LaunchOptions(), root=root, python="PY")
    assert plan.unpack == [] and plan.cwd == plan.local_code == str(root / "opt/ml/code")
    env = clean_env(tmp_path, TRAINER_SAGEMAKER_ROOT=str(root), SM_NUM_GPUS="0", TRAINER_CODE_SHA256="0" * 64)
    out = subprocess.run([PY, "-m", "trainer.launch"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"local code ran in {root / 'opt/ml/code'}" in out.stdout
    assert "SageMaker local code): no bundle, its sha256 is not checked" in out.stderr


def test_sagemaker_empty_local_code_folder_falls_back_to_the_code_channel(tmp_path: Path) -> None:
    hp = {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"/opt/ml/code"'}
    root = _sagemaker_root(tmp_path / "sm", ["algo-1"], "algo-1", hp)
    (root / "opt/ml/code").mkdir(parents=True)
    plan = plan_from_env({}, LaunchOptions(), root=root, python="PY")
    assert plan.unpack == [(str(root / "opt/ml/input/data/code/sourcedir.tar.gz"), str(root / "opt/ml/code"))]


def test_sagemaker_bad_config_still_writes_failure(tmp_path: Path) -> None:
    root = _sagemaker_root(tmp_path / "sm", ["algo-1"], "algo-9", {})
    env = clean_env(tmp_path, TRAINER_SAGEMAKER_ROOT=str(root))
    out = subprocess.run(launch_cmd("--dry-run"), env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "current_host 'algo-9' is not in hosts" in (root / "opt/ml/output/failure").read_text()


def test_sagemaker_os_error_is_one_line_in_the_failure_file(tmp_path: Path) -> None:
    """An OS error while preparing (here: the code tarball is a folder) ends in one clear line, no traceback."""
    root = _sagemaker_root(tmp_path / "sm", ["algo-1"], "algo-1", {"sagemaker_program": '"train.py"'})
    (root / "opt/ml/input/data/code/sourcedir.tar.gz").mkdir(parents=True)
    env = clean_env(tmp_path, TRAINER_SAGEMAKER_ROOT=str(root), SM_NUM_GPUS="0")
    out = subprocess.run([PY, "-m", "trainer.launch"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    failure = (root / "opt/ml/output/failure").read_text()
    assert failure.count("\n") == 1 and "sourcedir.tar.gz" in failure and "running as uid" in failure, failure
