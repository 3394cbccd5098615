"""Security: secret values never written down, hostile text inert on every target, owner-only
files, non-root pods.

Real execution where it can run here: the local target's rendered script and its real submit
path, and the SLURM batch script under bash (with `srun`/`scontrol` shimmed by PATH wrappers and
the trainer launcher replaced by a recorder), so "nothing executed" is observed, not assumed.
"""

from __future__ import annotations

import json
import os
import stat
import string
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from run_cli import cli  # tests/support
from trainctl.job import Job
from trainctl.targets.base import json_text

from .conftest import report

sys.path.insert(0, str(Path(__file__).parents[1] / "kubernetes"))  # the ported Kubeflow controllers
from k8s_testlib import runtimes
from pod_runner import expand as kube_expand
from port_trainer import NODE, build_jobset

ECR_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1"
SAGEMAKER = {"role_arn": "arn:aws:iam::123456789012:role/train", "instance_type": "ml.m5.xlarge",
             "output_s3_uri": "s3://bucket/out"}  # fmt: skip
TARGETS = ("local", "slurm", "kubernetes", "sagemaker")
SECRET = st.builds(
    lambda s: "S3cr3t" + s,
    st.text(alphabet=string.ascii_letters + string.digits + "!#%+,-./:;=?@^_~", min_size=10, max_size=40),
)
PROPERTY = settings(max_examples=int(os.environ.get("RELIABILITY_PROPERTY_EXAMPLES", "40")), deadline=None,
                    derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "state"
    monkeypatch.setenv("TRAINCTL_HOME", str(path))
    return path


@pytest.fixture
def recorder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """(program, output): a stand-in for the launcher that appends its argv and env as JSON lines."""
    program = tmp_path / "bin" / "recorder"
    program.parent.mkdir()
    program.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "with open(os.environ['RECORDER_OUT'], 'a') as fh:\n"
        "    fh.write(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}) + '\\n')\n"
    )
    program.chmod(0o755)
    out = tmp_path / "recorded.jsonl"
    monkeypatch.setenv("RECORDER_OUT", str(out))
    yield program, out


def recorded(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def after_dashdash(argv: list[str]) -> list[str]:
    return argv[argv.index("--") + 1 :]


def all_targets_job(command: list[str], env: dict[str, str], secrets: list[dict[str, str]], **more: Any) -> Job:
    return Job.parse({
        "name": "sec-job", "image": ECR_IMAGE, "command": command, "env": env, "secrets": secrets,
        "sagemaker": SAGEMAKER, **more,
    })  # fmt: skip


# ---------------------------------------------------------------- secrets


def files_text(root: Path, skip: Path | None = None) -> Iterator[tuple[Path, bytes]]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and (skip is None or skip not in path.parents):
            yield path, path.read_bytes()


@PROPERTY
@given(value=SECRET)
def test_no_secret_value_in_any_render_or_cli_output(
    value: str, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The value sits everywhere a target could read it from (the local secret store, a SLURM
    secrets_dir, this process's own environment); no render and no CLI output may contain it."""
    (home / "secrets").mkdir(parents=True, exist_ok=True)
    (home / "secrets" / "hf-token").write_text(value)
    monkeypatch.setenv("HF_TOKEN", value)
    monkeypatch.setenv("TRAINCTL_SECRETS_DIR", str(home / "secrets"))
    job = all_targets_job(["python", "train.py"], {"A": "1"}, [{"env": "HF_TOKEN", "name": "hf-token"}],
                          slurm={"secrets_dir": str(home / "secrets")})  # fmt: skip
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job.to_yaml())
    (tmp_path / "train.py").write_text("")  # validate checks the script is where the local run reads it
    for target in TARGETS:
        rendered = job.render(target)
        for text in (rendered.text, json_text(rendered.native), *rendered.notes):
            assert value not in text, f"{target} render holds the secret value"
        for argv in (["render", str(job_file), "-t", target], ["validate", str(job_file), "-t", target]):
            result = cli(*argv)
            assert result.exit_code == 0, result.output
            assert value not in result.output
    # an error about secrets names the secret and the file, never the value
    bad = job_file.with_name("bad.yaml")
    bad.write_text(job.to_yaml().replace("hf-token", "missing-token"))
    result = cli("submit", str(bad), "-t", "local")
    assert result.exit_code == 2 and "missing-token" in result.output and value not in result.output


@settings(max_examples=3, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(value=SECRET)
def test_local_run_gets_the_secret_but_never_writes_it_down(
    value: str, tmp_path: Path, home: Path, recorder: tuple[Path, Path]
) -> None:
    """A real local submit: the value reaches the program's environment, and no file trainctl
    wrote (registry, run folder, log) nor any CLI output holds it."""
    program, out = recorder
    out.unlink(missing_ok=True)
    (home / "secrets").mkdir(parents=True, exist_ok=True)
    (home / "secrets" / "hf-token").write_text(value + "\n")
    job = all_targets_job(["python", "train.py"], {"A": "1"}, [{"env": "HF_TOKEN", "name": "hf-token"}],
                          local={"python": str(program)})  # fmt: skip
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job.to_yaml())
    (tmp_path / "train.py").write_text("")  # submit checks the script is where the local run reads it
    outputs = [cli("submit", str(job_file), "-t", "local", "--wait")]
    assert outputs[0].exit_code == 0, outputs[0].output
    run_id = outputs[0].output.split("submitted ", 1)[1].split()[0] if "submitted " in outputs[0].output else ""
    outputs += [cli(*argv) for argv in (["list"], ["status", run_id], ["logs", run_id])]
    got = recorded(out)
    assert got and got[0]["env"]["HF_TOKEN"] == value, "the secret did not reach the program"
    for result in outputs:
        assert value not in result.output
    for path, data in files_text(home, skip=home / "secrets"):
        assert value.encode() not in data, f"{path} holds the secret value"


# ---------------------------------------------------------------- injection

MARK = "PWNED"


def hostile(marker: Path) -> list[str]:
    """Text that would run `touch marker` (or change meaning) if any layer interpreted it."""
    m = str(marker)
    return [
        f"$(touch {m})", f"`touch {m}`", f"'; touch {m}; '", f'"; touch {m}; "', f"x\ntouch {m}\n", f"a;touch {m}",
        f"a|touch {m}", f"a&&touch {m}", f"a > {m}", "--flag=$HOME ${IFS} !! \\ *", "$(HOME)", "$$(HOME)", "$(V0)", "$", "$$",
        "key: value", "- item", "{json: [1]}", '"quoted": true', "#comment", "&anchor *alias", "null", "~", "yes",
        "0x1F", "1e3", "tab\there", "line\u2028sep", "\\n", "%(x)s", "{0}", "}}{{", "ünï©ødé",
    ]  # fmt: skip


HOSTILE_TEXT = st.text(alphabet="$`'\"\\;|&<>(){}[]*?!#~\n\t :-,%@=abcHOME", min_size=1, max_size=24)


def env_of_hostile(values: list[str]) -> dict[str, str]:
    return {f"V{i}": v for i, v in enumerate(values)}


KUBE_APIS = ("trainjob", "pytorchjob")


def with_api(job: Job, api: str) -> Job:
    data = job.to_dict()
    data["kubernetes"] = {**(data.get("kubernetes") or {}), "api": api}
    return Job.parse(data)


def kube_pods(job: Job) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, trainer container) of every pod template the cluster would run for `job`: a
    PyTorchJob's replicas as rendered; a TrainJob through the ported Trainer v2.3.0 controller with
    trainctl's ClusterTrainingRuntime (k8s/), since that runtime holds the pod's security context."""
    for doc in yaml.safe_load_all(job.render("kubernetes").text):
        if not doc:
            continue
        if doc["kind"] == "PyTorchJob":
            for replica in doc["spec"]["pytorchReplicaSpecs"].values():
                pod = replica["template"]["spec"]
                yield pod, pod["containers"][0]
        elif doc["kind"] == "TrainJob":
            jobset = build_jobset(doc, runtimes()[doc["spec"]["runtimeRef"]["name"]])
            for rjob in jobset["spec"]["replicatedJobs"]:
                pod = rjob["template"]["spec"]["template"]["spec"]
                yield pod, next(c for c in pod["containers"] if c["name"] == NODE)


def check_kubernetes(job: Job, command: list[str], env: dict[str, str]) -> None:
    kinds = set()
    for api in KUBE_APIS:
        variant = with_api(job, api)
        for _, container in kube_pods(variant):
            kinds.add(api)
            defined: dict[str, str] = {}
            for item in container["env"]:
                if "value" in item:
                    defined[item["name"]] = kube_expand(item["value"], defined)
            argv = [kube_expand(a, defined) for a in container["command"]]
            assert after_dashdash(argv) == command, f"{api}: kubelet would run other arguments"
            for key, value in env.items():
                assert defined[key] == value, f"{api}: env {key} would arrive changed"
    assert kinds == set(KUBE_APIS)


def check_sagemaker(job: Job, command: list[str], env: dict[str, str]) -> None:
    request = json.loads(job.render("sagemaker").text)
    assert json.loads(request["HyperParameters"]["trainctl_command"]) == command
    for key, value in env.items():
        assert request["Environment"][key] == value


def run_local_script(job: Job, tmp: Path, out: Path) -> dict[str, Any]:
    script = tmp / "local.sh"
    script.write_text(job.render("local").text)
    run_dir = tmp / "run dir $(x)"
    run_dir.mkdir(exist_ok=True)
    out.unlink(missing_ok=True)
    env = {**os.environ, "TRAINCTL_RUN_DIR": str(run_dir)}
    proc = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=30, cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    return recorded(out)[-1]


def slurm_shims(bindir: Path, recorder: Path) -> None:
    bindir.mkdir(exist_ok=True)
    (bindir / "srun").write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do case "$1" in --*) shift;; *) break;; esac; done\nexec "$@"\n'
    )
    (bindir / "scontrol").write_text("#!/bin/sh\necho localhost\n")
    (bindir / "trainer-launch").write_text(f'#!/bin/sh\nexec {recorder} "$@"\n')
    for name in ("srun", "scontrol", "trainer-launch"):
        (bindir / name).chmod(0o755)


def run_slurm_script(job: Job, tmp: Path, recorder: Path, out: Path) -> dict[str, Any]:
    script = tmp / "job.sbatch"
    script.write_text(job.render("slurm").text)
    slurm_shims(tmp / "shims", recorder)
    out.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{tmp / 'shims'}:{os.environ['PATH']}", "SLURM_JOB_ID": "42",
           "SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1"}  # fmt: skip
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30, cwd=tmp)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return recorded(out)[-1]


def injection_job(tmp: Path, command: list[str], env: dict[str, str], program: Path) -> Job:
    workdir = tmp / "work dir 'q' $(x)"
    return all_targets_job(command, env, [], local={"python": str(program)},
                           slurm={"workdir": str(workdir)})  # fmt: skip


def check_all(job: Job, command: list[str], env: dict[str, str], tmp: Path, program: Path, out: Path) -> None:
    check_kubernetes(job, command, env)
    check_sagemaker(job, command, env)
    for got in (run_local_script(job, tmp, out), run_slurm_script(job, tmp, program, out)):
        assert after_dashdash(got["argv"]) == command
        for key, value in env.items():
            assert got["env"][key] == value


def test_hostile_text_is_inert_on_every_target(tmp_path: Path, recorder: tuple[Path, Path]) -> None:
    program, out = recorder
    marker = tmp_path / MARK
    values = hostile(marker)
    command = ["printf", "%s\\n", *values]
    env = env_of_hostile(values)
    job = injection_job(tmp_path, command, env, program)
    check_all(job, command, env, tmp_path, program, out)
    assert not marker.exists(), "a hostile value was executed"
    report("injection-fixed", strings=len(values), targets=4, executed=0)


@settings(max_examples=int(os.environ.get("RELIABILITY_INJECTION_EXAMPLES", "15")), deadline=None, derandomize=True,
          database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(values=st.lists(HOSTILE_TEXT, min_size=1, max_size=4))
def test_generated_hostile_text_is_inert(values: list[str], tmp_path: Path, recorder: tuple[Path, Path]) -> None:
    program, out = recorder
    command = ["printf", *values]
    env = env_of_hostile(values)
    job = injection_job(tmp_path, command, env, program)
    check_all(job, command, env, tmp_path, program, out)


def test_local_submit_runs_hostile_argv_verbatim(tmp_path: Path, home: Path, recorder: tuple[Path, Path]) -> None:
    """The real submit path (detached runner), not only the rendered script."""
    program, out = recorder
    marker = tmp_path / MARK
    values = hostile(marker)
    job = injection_job(tmp_path, ["printf", *values], env_of_hostile(values), program)
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job.to_yaml())
    result = cli("submit", str(job_file), "-t", "local", "--wait")
    assert result.exit_code == 0, result.output
    got = recorded(out)[-1]
    assert after_dashdash(got["argv"]) == ["printf", *values]
    assert all(got["env"][k] == v for k, v in env_of_hostile(values).items())
    assert not marker.exists()


# ---------------------------------------------------------------- permissions and pods


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_registry_run_folder_and_rendered_files_are_owner_only(
    tmp_path: Path, home: Path, recorder: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    program, _ = recorder
    monkeypatch.chdir(tmp_path)
    os.umask(0o022)  # a typical, permissive umask: trainctl must not rely on a strict one
    job = all_targets_job(["printf", "x"], {}, [], local={"python": str(program)})
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job.to_yaml())
    result = cli("submit", str(job_file), "-t", "local", "--wait")
    assert result.exit_code == 0, result.output
    assert mode(home) == 0o700
    for name in ("runs.db", "runs.db-wal", "runs.db-shm"):
        if (home / name).exists():
            assert mode(home / name) & 0o077 == 0, f"{name}: {oct(mode(home / name))}"
    run_dirs = list((home / "runs").iterdir())
    assert run_dirs and all(mode(d) == 0o700 for d in run_dirs)

    def reachable_by_others(path: Path) -> bool:
        """No owner-only directory between the state dir and `path`, and `path` itself is open."""
        chain = [path, *[p for p in path.parents if home in p.parents or p == home]]
        return all(mode(p) & 0o077 for p in chain)

    loose = [f"{p} {oct(mode(p))}" for p in home.rglob("*") if reachable_by_others(p)]
    assert not loose, f"readable by others: {loose}"


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_render_o_follows_the_umask(tmp_path: Path, umask: int) -> None:
    """A render holds no secret value (test_no_secret_value_in_any_render_or_cli_output), only names, as the job
    file does: `render -o` writes under the umask, as `render > FILE` and `init` do; a file that exists keeps
    its mode, as with `>` (issue 27 finding 17: it had forced 0600)."""
    job = all_targets_job(["printf", "x"], {}, [], local={"python": "/usr/bin/python3"})
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job.to_yaml())
    before = os.umask(umask)
    try:
        for target in TARGETS:
            out = tmp_path / f"rendered-{target}"
            result = cli("render", str(job_file), "-t", target, "-o", str(out))
            assert result.exit_code == 0, result.output
            assert mode(out) == 0o666 & ~umask, f"{out}: {oct(mode(out))}"
        kept = tmp_path / "kept"
        kept.write_text("old")
        kept.chmod(0o640)
        assert cli("render", str(job_file), "-o", str(kept)).exit_code == 0
        assert mode(kept) == 0o640 and kept.read_text() != "old"
    finally:
        os.umask(before)


def test_validate_and_render_write_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside its state and output folders trainctl writes nothing; validate and render write nowhere."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRAINCTL_HOME", str(tmp_path / "state"))
    job = all_targets_job(["printf", "x"], {}, [])
    (tmp_path / "job.yaml").write_text(job.to_yaml())
    before = sorted(p.name for p in tmp_path.iterdir())
    for target in TARGETS:
        for argv in (["validate", "job.yaml", "-t", target], ["render", "job.yaml", "-t", target]):
            result = cli(*argv)
            assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_kubernetes_pods_run_as_non_root_with_a_tight_security_context() -> None:
    """Every pod of both kinds: a TrainJob (the default; Trainer v2 has no elastic mode) and a PyTorchJob."""
    cmd = {"name": "cmd", "command": ["python", "x.py"], "resources": {"nodes": 3}}
    gpu = {"name": "gpu", "command": ["python", "x.py"], "resources": {"nodes": 2, "gpus_per_node": 8}}
    elastic = {**gpu, "resources": {**gpu["resources"], "elastic": {"min_nodes": 1, "max_nodes": 4}}}
    jobs = [("trainjob", Job.parse(cmd)), ("trainjob", Job.parse(gpu))]
    jobs += [("pytorchjob", Job.parse({**j, "kubernetes": {"api": "pytorchjob"}})) for j in (cmd, gpu, elastic)]
    checked: dict[str, int] = {}
    for api, job in jobs:
        for pod, _ in kube_pods(job):
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["runAsUser"] != 0
            assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
            for container in pod["containers"] + pod.get("initContainers", []):
                ctx = container["securityContext"]
                assert ctx["allowPrivilegeEscalation"] is False and ctx["privileged"] is False
                assert ctx["capabilities"]["drop"] == ["ALL"] and ctx["runAsNonRoot"] is True
                assert ctx.get("runAsUser", pod["securityContext"]["runAsUser"]) != 0
                checked[api] = checked.get(api, 0) + 1
    assert checked.get("trainjob", 0) >= 2 and checked.get("pytorchjob", 0) >= 3, checked
