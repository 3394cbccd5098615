"""The two flavors of the one Dockerfile (cuda: its defaults; cpu: trainer_image/flavor-cpu.args)
differ only in the base, its Python, the lock and the versions the labels carry.

What would make them drift, and fails here: a flavor argument used by an instruction of the
runtime stage other than a LABEL (user, layout, env, entrypoint would then depend on the flavor),
an argument file that overrides anything else, a build script that picks another stage or file,
or a cpu lock that is not the cuda lock minus the CUDA wheels.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

# What may differ between the flavors (BASE_NAME/BASE_DIGEST: scripts/image.sh adds the local base).
FLAVOR_ARGS = {
    "FLAVOR",
    "BASE_NAME",
    "BASE_DIGEST",
    "UBUNTU_VER",
    "PYTHON_VER",
    "LOCK",
    "TORCH_VER",
    "CUDA_VER",
    "CUDNN_VER",
    "NCCL_VER",
}
# Packages only the CUDA build of torch brings.
CUDA_ONLY = re.compile(r"^(nvidia-.*|cuda-.*|triton)$")


def _mentions(value: str, names: set[str]) -> set[str]:
    return {n for n in names if re.search(rf"\$\{{{n}\}}|\${n}\b", value)}


def test_cpu_args_override_only_flavor_arguments(dockerfile: Any, cpu_args: dict[str, str]) -> None:
    assert set(cpu_args) <= FLAVOR_ARGS, set(cpu_args) - FLAVOR_ARGS
    assert set(cpu_args) <= set(dockerfile.global_args), "every flavor argument is a global ARG"
    assert cpu_args["FLAVOR"] == "cpu" and dockerfile.global_args["FLAVOR"] == "cuda"


def test_runtime_layout_does_not_depend_on_the_flavor(dockerfile: Any) -> None:
    """User, folders, env, workdir, entrypoint: the runtime stage uses flavor arguments only in LABEL."""
    for ins in dockerfile.final.instructions:
        if ins.keyword in ("ARG", "LABEL"):
            continue
        used = _mentions(ins.value, FLAVOR_ARGS)
        assert not used, f"line {ins.line}: {ins.keyword} depends on flavor argument(s) {sorted(used)}"


def test_both_flavors_have_the_same_stages_and_labels(dockerfile: Any, cpu_args: dict[str, str]) -> None:
    cpu = dockerfile.with_args({**cpu_args, "BASE_NAME": "localhost/trainctl-base:x", "BASE_DIGEST": "sha256:0"})
    assert (
        [s.name for s in cpu.stages] == [s.name for s in dockerfile.stages] == ["base", "builder", "trainer", "runtime"]
    )
    labels = " ".join(dockerfile.final.values("LABEL"))
    assert 'io.trainctl.flavor="${FLAVOR}"' in labels
    # every label that echoes an argument has a value in both flavors
    for name in re.findall(r"\$\{(\w+)\}", labels):
        assert dockerfile.expand(f"${{{name}}}") and cpu.expand(f"${{{name}}}"), name


def test_image_script_builds_the_final_stage_of_this_dockerfile(repo: Path) -> None:
    text = (repo / "scripts/image.sh").read_text()
    builds = [line for line in text.splitlines() if re.search(r'"\$rt" build\b', line)]
    # One build of the trainer, of the Dockerfile's final stage: one image (one ID) for every target, SageMaker
    # included. The other build is the controller's own image (controller.Dockerfile, no trainer in it).
    trainer = [line for line in builds if "-f Dockerfile" in line]
    controller = [line for line in builds if "controller.Dockerfile" in line]
    assert len(builds) == 2 and len(trainer) == 1 and len(controller) == 1, builds
    assert "--target" not in text and "sagemaker" not in text.lower()
    assert "trainer_image/flavor-cpu.args" in text


def test_cpu_lock_is_the_cuda_lock_without_cuda(
    lock: dict[str, str], cpu_lock: dict[str, str], cpu_args: dict[str, str], trainer_pyproject: dict[str, Any]
) -> None:
    assert cpu_lock["torch"] == cpu_args["TORCH_VER"]
    assert cpu_lock["torch"].split("+")[0] == lock["torch"], "same torch release in both flavors"
    assert not [n for n in cpu_lock if CUDA_ONLY.match(n)]
    assert set(cpu_lock) == {n for n in lock if not CUDA_ONLY.match(n)}, set(cpu_lock) ^ set(lock)
    for dep in trainer_pyproject["project"]["dependencies"]:
        req = Requirement(dep)
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert req.specifier.contains(cpu_lock[name], prereleases=True), f"{dep} vs cpu lock {cpu_lock[name]}"


def test_cpu_lock_is_hashed_for_the_cpu_python(repo: Path, cpu_args: dict[str, str]) -> None:
    text = (repo / "trainer_image/requirements-cpu.lock").read_text()
    assert f"--python-version {cpu_args['PYTHON_VER']}" in text.splitlines()[1]
    entries = re.split(r"\n(?=[a-z0-9])", text)
    unhashed = [e.splitlines()[0] for e in entries if "==" in e.split("\n")[0] and "--hash=sha256:" not in e]
    assert unhashed == []
