"""The local target's render: golden files, determinism, path rules, and a script that runs exactly the argv."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from trainctl import Job, JobError
from trainctl.targets.base import json_text
from trainctl.targets.local import engine as local_engine

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "local"
GOLDEN_JOBS = [*sorted((GOLDEN / "jobs").glob("*.yaml")), ROOT / "examples" / "digits.yaml"]


def normalized(text: str, job: Job) -> str:
    """Machine-specific parts replaced, so the golden files hold on any checkout and interpreter."""
    assert job.base_dir is not None
    text = text.replace(sys.executable, "/PYTHON")
    return text.replace(str(job.base_dir), "/JOB_DIR").replace(str(ROOT), "/REPO")


@pytest.mark.parametrize("job_file", GOLDEN_JOBS, ids=[p.stem for p in GOLDEN_JOBS])
def test_golden(job_file: Path, golden: Callable[[Path, str], None]) -> None:
    job = Job.from_yaml(job_file)
    rendered = job.render("local")
    outputs = {
        GOLDEN / f"{job_file.stem}.sh": normalized(rendered.text, job),
        GOLDEN / f"{job_file.stem}.json": normalized(json_text(rendered.native), job),
    }
    for path, text in outputs.items():
        golden(path, text)
    assert rendered.filename == f"{job.name}.sh" and rendered.target == "local"


@pytest.mark.parametrize("job_file", GOLDEN_JOBS, ids=[p.stem for p in GOLDEN_JOBS])
def test_rendered_scripts_pass_shellcheck(job_file: Path, tmp_path: Path) -> None:
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    script = tmp_path / "run.sh"
    script.write_text(Job.from_yaml(job_file).render("local").text)
    result = subprocess.run([shellcheck, "--severity=style", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_render_is_deterministic_across_processes_and_folders(tmp_path: Path) -> None:
    job_file = GOLDEN / "jobs" / "trainer-elastic.yaml"
    here = Job.from_yaml(job_file).render("local").text
    code = (
        f"from trainctl import Job; import sys; sys.stdout.write(Job.from_yaml({str(job_file)!r}).render('local').text)"
    )
    there = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert here == there.stdout == Job.from_yaml(job_file).render("local").text


def test_digits_render_is_the_launcher_with_two_gloo_processes() -> None:
    job = Job.from_yaml(ROOT / "examples" / "digits.yaml")
    native = job.render("local").native
    argv = native["argv"]
    assert argv[:3] == [sys.executable, "-m", "trainer.launch"]
    assert argv[argv.index("--nproc-per-node") + 1] == "2"
    program = argv[argv.index("--") + 1 :]
    assert program[:3] == [sys.executable, "-m", "trainer.train"]
    flags = dict(zip(program[3::2], program[4::2], strict=True))
    assert flags["--train-data"] == str(ROOT / "examples" / "data" / "digits" / "train.jsonl")
    assert flags["--output-dir"] == "${TRAINCTL_RUN_DIR}/output"
    assert flags["--checkpoint-dir"] == "${TRAINCTL_RUN_DIR}/checkpoints"
    assert native["cwd"] == "${TRAINCTL_RUN_DIR}/work"  # the run's own working folder
    assert native["env"]["OMP_NUM_THREADS"] == "1" and native["max_runtime_s"] == 1800


def test_paths_resolve_against_the_job_folder_not_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "j.yaml").write_text(
        "name: paths\ncommand: [run]\n"
        "data: {rel: d/x, up: ../y, abs: /z, home: ~/w, file: 'file://rel2', var: '${DATA}/v'}\n"
        "output_dir: out\ncheckpoint: {dir: /ck}\n"
    )
    monkeypatch.chdir(tmp_path)
    env = Job.from_yaml(folder / "j.yaml").render("local").native["env"]
    assert env["TRAINER_DATA_REL"] == str(folder / "d" / "x")
    assert env["TRAINER_DATA_UP"] == str(tmp_path / "y")
    assert env["TRAINER_DATA_ABS"] == "/z"
    assert env["TRAINER_DATA_HOME"] == os.path.expanduser("~/w")
    assert env["TRAINER_DATA_FILE"] == str(folder / "rel2")
    assert env["TRAINER_DATA_VAR"] == "${DATA}/v"
    assert env["TRAINER_OUTPUT_DIR"] == str(folder / "out") and env["TRAINER_CHECKPOINT_DIR"] == "/ck"


def test_a_job_built_in_python_resolves_against_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    job = Job(name="nb", trainer={"model": "digits"}, data={"train": "t.jsonl"})  # type: ignore[arg-type]
    native = job.render("local").native
    assert native["cwd"] == "${TRAINCTL_RUN_DIR}/work"
    assert str(tmp_path / "t.jsonl") in native["argv"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"resources": {"nodes": 2}}, "resources.nodes"),
        ({"data": {"train": "pvc://claim/train"}}, "data.train"),
        ({"trainer": {"model": "digits", "train_data": "s3://bucket/train"}}, "trainer.train_data"),
    ],
)
def test_what_the_local_target_cannot_run_is_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    job = Job.parse({"name": "x", "trainer": {"model": "digits"}, "data": {"train": "t"}, **change})
    with pytest.raises(JobError) as info:
        job.render("local")
    assert info.value.problems[0].startswith(field + ":")


def test_secret_values_never_appear_only_their_files() -> None:
    job = Job.from_yaml(GOLDEN / "jobs" / "command-secrets.yaml")
    rendered = job.render("local")
    assert rendered.native["secret_files"] == {
        "DB_PASSWORD": "${TRAINCTL_SECRETS_DIR}/db/prod/password",
        "WANDB_API_KEY": "${TRAINCTL_SECRETS_DIR}/wandb",
    }
    assert "WANDB_API_KEY" not in rendered.native["env"]
    assert rendered.notes == ()


def test_notes_for_spot_and_gpus() -> None:
    notes = Job.from_yaml(GOLDEN / "jobs" / "gpu-bf16.yaml").render("local").notes
    assert any(n.startswith("spot") for n in notes) and any("gpus_per_node=2" in n for n in notes)


def _fake_python(tmp_path: Path) -> Path:
    """An executable that records the argv, cwd and environment it was started with."""
    fake = tmp_path / "bin" / "fakepython"
    fake.parent.mkdir()
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "json.dump({'argv': sys.argv[1:], 'cwd': os.getcwd(), 'env': dict(os.environ)},"
        " open(os.environ['DUMP'], 'w'))\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return fake


def test_the_script_runs_exactly_the_native_argv_env_and_cwd(tmp_path: Path) -> None:
    fake = _fake_python(tmp_path)
    folder = tmp_path / "job"
    (folder / "src").mkdir(parents=True)
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "tok").write_text("s3cr3t value\n")
    (tmp_path / "secrets" / "wandb").write_text("w")
    text = (GOLDEN / "jobs" / "command-secrets.yaml").read_text()
    text = text.replace("python3.11", str(fake)).replace(
        "{env: DB_PASSWORD, name: db/prod, key: password}", "{env: TOK, name: tok}"
    )
    (folder / "job.yaml").write_text(text)
    rendered = Job.from_yaml(folder / "job.yaml").render("local")
    script = tmp_path / "run.sh"
    script.write_text(rendered.text)
    run_dir = tmp_path / "run dir with 'quotes'"
    env = {
        "PATH": os.environ["PATH"],
        "DUMP": str(tmp_path / "dump.json"),
        "TRAINCTL_RUN_DIR": str(run_dir),
        "TRAINCTL_SECRETS_DIR": str(tmp_path / "secrets"),
        "HOME": "/home/nobody",
    }
    subprocess.run(["sh", str(script)], env=env, check=True)
    seen = SimpleNamespace(**json.loads((tmp_path / "dump.json").read_text()))
    native = local_engine._substitute(rendered.native, run_dir, tmp_path / "secrets")
    assert [str(fake), *seen.argv] == native["argv"]
    assert 'it\'s a "quoted" $HOME arg' in seen.argv and "*.jsonl" in seen.argv
    assert seen.cwd == str(folder / "src") == native["cwd"]
    for key, value in native["env"].items():
        assert seen.env[key] == value
    assert seen.env["TOK"] == "s3cr3t value"


def test_container_render_runs_the_image_as_10001_read_only(tmp_path: Path) -> None:
    """local.container: the image's entrypoint with the launcher's options, data read-only under /data,
    output and checkpoints under /workspace, env (and secrets) passed by name only; shellcheck-clean."""
    job = Job.from_yaml(ROOT / "examples/digits.yaml").with_overrides(
        ["local.container=podman", "image=localhost/trainctl-trainer:0.1.0-cpu", "env.FOO=bar"]
    )
    from trainctl.job import Secret

    job = job.model_copy(update={"secrets": [Secret(env="TOKEN", name="token")]})
    rendered = job.render("local")
    argv = rendered.native["argv"]
    assert argv[:2] == ["podman", "run"]
    for flag in (["--user", "10001:10001"], ["--read-only"], ["--pull", "never"], ["--network", "host"]):
        assert any(argv[i : i + len(flag)] == flag for i in range(len(argv))), flag
    image_at = argv.index("localhost/trainctl-trainer:0.1.0-cpu")
    assert argv[image_at + 1 : image_at + 5] == ["--platform", "local", "--nproc-per-node", "2"], "trainer-launch's"
    volumes = [argv[i + 1] for i, w in enumerate(argv) if w == "--volume"]
    data = ROOT / "examples/data/digits"
    assert f"{data}/train.jsonl:/data/train:ro" in volumes and f"{data}/val.jsonl:/data/val:ro" in volumes
    assert "${TRAINCTL_RUN_DIR}/output:/workspace/output" in volumes
    envs = [argv[i + 1] for i, w in enumerate(argv) if w == "--env"]
    assert "FOO" in envs and "TOKEN" in envs and not [e for e in envs if "=" in e]
    assert rendered.native["secret_files"] == {"TOKEN": "${TRAINCTL_SECRETS_DIR}/token"}, "read at submit, not here"
    program = argv[argv.index("--") + 1 :]
    assert program[:3] == ["python", "-m", "trainer.train"]
    assert program[program.index("--train-data") + 1] == "/data/train"
    assert program[program.index("--checkpoint-dir") + 1] == "/workspace/checkpoints"
    script = tmp_path / "run.sh"
    script.write_text(rendered.text)
    shellcheck = Path(sys.executable).parent / "shellcheck"
    run = subprocess.run([str(shellcheck), str(script)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout


def test_spec_sha256_is_the_job_as_written_wherever_it_lies(tmp_path: Path) -> None:
    """Relative paths resolve per checkout; the provenance hash must not (it names the job, not the machine)."""
    source = GOLDEN / "jobs" / "trainer-elastic.yaml"
    copy = tmp_path / "elsewhere" / source.name
    copy.parent.mkdir()
    shutil.copy(source, copy)
    envs = [Job.from_yaml(p).render("local").native["env"] for p in (source, copy)]
    hashes = {json.loads(env["TRAINCTL_PROVENANCE"])["spec_sha256"] for env in envs}
    assert len(hashes) == 1


@pytest.mark.parametrize(
    ("command", "resolved"),
    [
        (["python", "train.py", "--out", "o.txt"], ["PY", "{dir}/train.py", "--out", "o.txt"]),
        (["python3", "src/train.py"], ["PY", "{dir}/src/train.py"]),
        (["./run.sh", "x"], ["{dir}/run.sh", "x"]),
        (["python", "-m", "pkg.train"], ["PY", "-m", "pkg.train"]),  # a module: found on the path, not a file
        # local.python's torchrun, as `python` is local.python; its arguments are read from work/
        (["torchrun", "train.py"], ["PY", "-m", "torch.distributed.run", "train.py"]),
        (["/opt/bin/train", "a"], ["/opt/bin/train", "a"]),
    ],
)
def test_a_commands_script_is_read_beside_the_job_file(tmp_path: Path, command: list[str], resolved: list[str]) -> None:
    """The program runs in the run's work/ folder; its script word is read from the job file's folder, as
    its data paths are, so `command: [python, train.py]` beside the job file keeps working."""
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump({"name": "cmd", "command": command}))
    native = Job.from_yaml(job_file).render("local").native
    program = native["argv"][native["argv"].index("--") + 1 :]
    expected = [w.replace("{dir}", str(tmp_path)) for w in resolved]
    assert program == [sys.executable if w == "PY" else w for w in expected]
    assert native["cwd"] == "${TRAINCTL_RUN_DIR}/work"
    # with local.workdir the folder is the user's: relative words stay relative to it
    mine = Job.from_yaml(job_file).with_overrides(["local.workdir=mine"]).render("local").native
    theirs = mine["argv"][mine["argv"].index("--") + 1 :]
    assert theirs[len(theirs) - len(command) + 1 :] == command[1:] and mine["cwd"] == str(tmp_path / "mine")


def test_a_container_reads_s3_with_the_runners_aws_variables_by_name() -> None:
    """local.container with s3:// data, output and checkpoints: the launcher stages into the container's own cache
    (mounted from $TRAINCTL_HOME/data-cache-container, given to 10001), and every AWS variable botocore reads for
    keys, a container role, the region and the S3 endpoint is passed by name; no value is in the argv."""
    from botocore.configprovider import BOTOCORE_DEFAUT_SESSION_VARIABLES, ConfiguredEndpointProvider
    from botocore.credentials import ContainerProvider, EnvProvider
    from trainctl.targets.local.container_argv import AWS_ENV

    botocore_reads = {EnvProvider.ACCESS_KEY, EnvProvider.SECRET_KEY, *EnvProvider.TOKENS, EnvProvider.EXPIRY_TIME,
                      ContainerProvider.ENV_VAR, ContainerProvider.ENV_VAR_FULL, ContainerProvider.ENV_VAR_AUTH_TOKEN,
                      BOTOCORE_DEFAUT_SESSION_VARIABLES["region"][1], "AWS_ENDPOINT_URL",
                      ConfiguredEndpointProvider({}, {}, "s3", {})._get_service_env_var_name()}  # fmt: skip
    assert botocore_reads | {"AWS_REGION"} == set(AWS_ENV)
    job = Job.parse({"name": "x", "trainer": {"model": "digits"}, "image": "img:1", "local": {"container": "podman"},
                     "data": {"train": "s3://b/train.jsonl"}, "output_dir": "s3://b/runs",
                     "checkpoint": {"dir": "s3://b/ckpt"}})  # fmt: skip
    native = job.render("local").native
    argv = native["argv"]
    assert argv[argv.index("--data-cache") + 1] == "/workspace/data-cache"
    assert "${TRAINCTL_RUN_DIR}/../../data-cache-container:/workspace/data-cache" in argv
    assert native["container"]["data_cache"] == "${TRAINCTL_RUN_DIR}/../../data-cache-container"
    assert {argv[i + 1] for i, w in enumerate(argv) if w == "--env"} >= set(AWS_ENV)
    plain = Job.parse({"name": "x", "trainer": {"model": "digits"}, "image": "img:1", "data": {"train": "t"},
                       "local": {"container": "podman"}}).render("local").native  # fmt: skip
    assert "AWS_ACCESS_KEY_ID" not in plain["argv"] and "data_cache" not in plain["container"], "no S3, no AWS"
