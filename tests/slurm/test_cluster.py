"""Against the real local SLURM cluster: sbatch accepts the scripts, and the engine side behaves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import procs  # tests/support (on sys.path through tests/conftest.py)
import pytest
from trainctl import EngineError, Job, Run, RunState
from trainctl.targets.slurm import engine as slurm_engine

pytestmark = pytest.mark.slurm
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm"
BOOM = Path(__file__).resolve().parents[1] / "programs" / "boom" / "boom_rank1.py"


def command_job(name: str, argv: list[str], workdir: Path, python_env: str, **extra: object) -> Job:
    spec: dict[str, object] = {
        "name": name,
        "command": argv,
        "slurm": {"python_env": python_env, "workdir": str(workdir)},
        **extra,
    }
    return Job.parse(spec)


@pytest.mark.parametrize("script", sorted(GOLDEN.glob("*.sh")), ids=lambda p: p.name)
def test_sbatch_test_only_accepts_golden(cluster: object, script: Path) -> None:
    done = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "to start at" in done.stderr, done.stderr


def test_virtual_nodes_resolve_to_this_host(cluster: object) -> None:
    """The launcher's master is the allocation's first node by name: every node must reach it."""
    done = subprocess.run(
        ["srun", "--nodes=2", "--ntasks-per-node=1", "getent", "hosts", "n1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["127.0.0.1", "127.0.0.1"]


def test_too_large_job_is_refused_with_what_the_cluster_has(cluster: object, tmp_path: Path, home: Path) -> None:
    job = command_job("huge", ["true"], tmp_path, sys.prefix, resources={"nodes": 3})
    with pytest.raises(EngineError) as info:
        job.submit("slurm")
    message = str(info.value)
    assert "sbatch refused job huge" in message and "node configuration is not available" in message
    assert "3 node(s)" in message and "2 node(s) with 4 CPUs" in message
    wide = command_job("wide", ["true"], tmp_path, sys.prefix, resources={"procs_per_node": 8})
    with pytest.raises(EngineError, match=r"1 node\(s\) x 8 CPUs"):
        wide.submit("slurm")


def test_failing_python_job_names_its_first_failing_rank(cluster: object, tmp_path: Path, home: Path) -> None:
    """Issue 37 section 1: rank 1 of 2 gloo processes raises; status names it, its node as SLURM calls it, the
    exception and its last lines (failure.json in the run's output folder, read through the login host)."""
    argv = ["python", str(BOOM)]
    job = command_job("fails", argv, tmp_path, sys.prefix, resources={"procs_per_node": 2})
    run = job.submit("slurm", wait=True, poll=0.5, timeout=120)
    status = run.status()
    assert status.state is RunState.FAILED and status.native_state == "FAILED"
    assert status.reason == "rank 1 on n1 failed (exit 1): RuntimeError: boom on rank 1 at epoch 2", status
    assert status.failure is not None and (status.failure.rank, status.failure.node) == (1, "n1")
    # the rank's stdout (its print) and stderr (the traceback) reach the log through two pipes, so their lines
    # may interleave either way: once in CI, loaded, the print came after the traceback's last line
    assert "RuntimeError: boom on rank 1 at epoch 2" in status.log_tail[-2:] and "epoch 2 on rank 1" in status.log_tail
    assert Run.from_id(run.id).paths.log == run.paths.log  # recorded in the registry


def test_a_launcher_missing_from_the_nodes_path_is_named_not_read_as_bad_input(
    cluster: object, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """srun cannot exec trainer-launch (a python_env without the trainer, and no other on the PATH the job
    inherits): slurmstepd exits with ENOENT, 2, the trainer's bad-input code; status names the launcher and
    the setting that fixes it."""
    empty_env = tmp_path / "env-without-trainer"
    (empty_env / "bin").mkdir(parents=True)
    path = [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "trainer-launch").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(path))  # sbatch's --export=ALL hands it to the job
    job = command_job("no-launcher", ["python", "-c", "pass"], tmp_path, str(empty_env))
    run = job.submit("slurm", wait=True, poll=0.5, timeout=120)
    status = run.status()
    assert status.state is RunState.FAILED and status.exit_code == 2, status
    assert status.reason.startswith(
        "trainer-launch could not start on n1 (execve(): trainer-launch: No such file or directory): the trainer "
        "is not installed in the environment on the nodes' PATH; set slurm.python_env to a virtualenv"
    ), status.reason
    assert "bad input" not in status.reason


def test_a_pyxis_job_on_a_cluster_without_pyxis_says_so(cluster: object, tmp_path: Path, home: Path) -> None:
    """This cluster has no pyxis: srun stops on --container-image (exit 255), the attempt is not retried (retrying
    cannot help), and status says what is missing."""
    spec = {"name": "no-pyxis", "command": ["python", "-c", "pass"], "image": "ghcr.io/org/trainer:1",
            "retries": 1, "slurm": {"container": "pyxis", "workdir": str(tmp_path)}}  # fmt: skip
    status = Job.parse(spec).submit("slurm", wait=True, poll=0.5, timeout=120).status()
    assert status.state is RunState.FAILED and status.exit_code == 255, status
    assert status.reason.startswith("srun does not know --container-image: pyxis, the SLURM plugin"), status.reason
    assert status.restarts == 0 and [(a.cause, a.reason) for a in status.attempts] == [
        ("invalid", "srun: no pyxis on this cluster (--container-image)")
    ], status.attempts


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            "slurmstepd-n2: error: execve(): podman: No such file or directory",
            "podman could not start on n2 (execve(): podman: No such file or directory): install podman on every node",
        ),
        (
            "slurmstepd: error: execve(): /opt/x/trainer-launch: Permission denied",
            "/opt/x/trainer-launch could not start (execve(): /opt/x/trainer-launch: Permission denied): "
            "/opt/x/trainer-launch must be a program the job's user may run on every node",
        ),
        (
            "slurmstepd-n1: error: execve(): bad interpreter(/gone/bin/python3): No such file or directory",
            "the launcher could not start on n1 (execve(): bad interpreter(/gone/bin/python3): No such file or "
            "directory): its interpreter is not there",
        ),
        (
            "srun: unrecognized option '--container-image=ghcr.io#org/trainer:1'",
            "srun does not know --container-image: pyxis, the SLURM plugin that adds it, is not installed",
        ),
        ("trainctl: job 2 finished with exit code 2", ""),
    ],
)
def test_slurmstepds_exec_errors_are_read_from_the_log(line: str, said: str) -> None:
    from trainctl.targets.slurm.status import not_started

    got = not_started(["srun: error: n1: task 0: Exited with exit code 2", line])
    assert got.startswith(said) and bool(got) == bool(said), got


def _pids_with(marker: str) -> list[int]:
    return [pid for pid, _ in procs.mentioning(marker)]


def test_cancel_leaves_no_process_behind(cluster: object, tmp_path: Path, home: Path) -> None:
    marker = f"trainctl-cancel-{os.getpid()}-{time.time_ns()}"
    argv = ["python", "-c", "import time; time.sleep(600)", marker]
    run = command_job("sleeper", argv, tmp_path, sys.prefix, resources={"nodes": 2}).submit("slurm")
    deadline = time.monotonic() + 90
    while len(_pids_with(marker)) < 2:  # one worker per node (and torchrun agents above them)
        assert time.monotonic() < deadline, "workers never started; log:\n" + "\n".join(slurm_engine.logs(run))
        time.sleep(0.3)
    assert run.status().state is RunState.RUNNING
    run.cancel()
    deadline = time.monotonic() + 60
    while _pids_with(marker) or run.status().state is not RunState.CANCELLED:
        assert time.monotonic() < deadline, f"left behind: {_pids_with(marker)}, state {run.status()}"
        time.sleep(0.3)
    run.cancel()  # cancelling a finished job is not an error


def test_values_are_never_executed_on_the_cluster(
    cluster: object, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Args, env values, a data path, the python_env and workdir paths full of shell syntax run as plain data."""
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.chdir(marks)  # the job starts here: a relative `touch x` that ran would leave x in marks
    payloads = [
        f"$(touch {marks}/a)",
        f"`touch {marks}/b`",
        f"'; touch {marks}/c; '",
        f'"; touch {marks}/d; "',
        f"line1\ntouch {marks}/e\n",
        "$(touch /tmp/pwned) ${HOME} !! \\ * ; | &",
    ]
    Path("/tmp/pwned").unlink(missing_ok=True)
    env_dir = tmp_path / "py env $(touch f)"
    env_dir.symlink_to(sys.prefix)
    workdir = tmp_path / "work dir $(touch g) `touch h`"
    probe = (
        "import json, os, sys; print('PROBE ' + json.dumps({'argv': sys.argv[1:], "
        "'env': {k: os.environ.get(k) for k in ('PAYLOAD', 'NEWLINE', 'TRAINER_DATA_TRAIN')}}), flush=True)"
    )
    job = command_job(
        "injection",
        ["python", "-c", probe, *payloads],
        workdir,
        str(env_dir),
        env={"PAYLOAD": payloads[0] + payloads[1], "NEWLINE": payloads[4]},
        data={"train": f"{tmp_path}/it's $(touch {marks}/i)"},
    )
    run = job.submit("slurm", wait=True, poll=0.5, timeout=120)
    lines = list(run.logs())
    assert run.status().state is RunState.SUCCEEDED, "\n".join(lines)
    probe_lines = [line for line in lines if line.startswith("[rank0] PROBE ")]  # the launcher's rank prefix
    assert probe_lines, "\n".join(lines)
    seen = json.loads(probe_lines[0].removeprefix("[rank0] PROBE "))
    assert seen["argv"] == payloads
    assert seen["env"] == {
        "PAYLOAD": payloads[0] + payloads[1],
        "NEWLINE": payloads[4],
        "TRAINER_DATA_TRAIN": f"{tmp_path}/it's $(touch {marks}/i)",
    }
    assert list(marks.iterdir()) == [] and not Path("/tmp/pwned").exists()
    assert Path(run.paths.log).parent == workdir


def test_remote_login_sends_every_command_through_ssh(
    cluster: object, tmp_path: Path, fake_ssh: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """slurm.login: the same code path with an ssh prefix; a wrapper records each call and runs it."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    job = command_job(
        "remote",
        ["python", "-c", "print('hello from the cluster')"],
        tmp_path / "remote work",
        sys.prefix,
        slurm={
            "python_env": sys.prefix,
            "workdir": str(tmp_path / "remote work"),
            "login": "me@login.example",
            "ssh_command": [str(fake_ssh.command), "-o", "BatchMode=yes"],
            "ssh_options": ["-p", "2222"],
        },
    )
    monkeypatch.setenv("PATH", str(empty))  # any command not sent through the wrapper would fail
    run = job.submit("slurm", wait=True, poll=0.5, timeout=120)
    assert run.status().state is RunState.SUCCEEDED
    assert "[rank0] hello from the cluster" in list(run.logs())
    run.cancel()
    calls = fake_ssh.calls()
    assert all(c[:4] == ["-o", "BatchMode=yes", "-p", "2222"] and c[4] == "me@login.example" for c in calls)
    programs = {c[5].split()[0] for c in calls}
    assert {"mkdir", "tee", "sbatch", "scontrol", "tail", "scancel"} <= programs
    assert any(c[5].startswith("mkdir -p -- '") and "remote work" in c[5] for c in calls)


def test_a_job_slurm_does_not_know_is_unknown_with_a_reason(cluster: object, home: Path) -> None:
    status = slurm_engine.status(Run(target="slurm", native_id="987654"))
    assert status.state is RunState.UNKNOWN and "MinJobAge" in status.reason


def test_scontrol_fields_keep_values_with_spaces() -> None:
    from trainctl.targets.slurm.status import parse_fields

    fields = parse_fields(
        "JobId=5 JobName=x JobState=PENDING Reason=BeginTime Dependency=(null) Requeue=1 "
        "ExitCode=0:0 StdOut=/shared/runs/a b/x-5.out Power="
    )
    assert fields["JobState"] == "PENDING" and fields["StdOut"] == "/shared/runs/a b/x-5.out"
    assert fields["Requeue"] == "1" and fields["Power"] == ""
