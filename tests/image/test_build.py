"""The cpu image, built for real with podman (scripts/image.sh) and run: CI's smoke test, the
built configuration against the Dockerfile, the cache, Python 3.11.2's tarball extraction, and
digits trained by 2 processes as user 10001 on a read-only root filesystem."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def _inspect(image: Any) -> dict[str, Any]:
    out = subprocess.run([image.runtime, "image", "inspect", image.ref], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout)[0])


def _run(image: Any, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [image.runtime, "run", "--rm", "--network", "host", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_build_prints_the_cpu_reference(trainer_image: Any, version_module: dict[str, str]) -> None:
    want = (
        os.environ.get("TRAINCTL_TEST_IMAGE_TAG") or f"localhost/trainctl-trainer:{version_module['__version__']}-cpu"
    )
    assert trainer_image.ref == want
    assert re.fullmatch(r"(sha256:)?[0-9a-f]{64}", trainer_image.id)


def test_ci_smoke_test_passes(trainer_image: Any, repo: Path) -> None:
    run = subprocess.run(
        ["bash", str(repo / "scripts/image.sh"), "smoke", trainer_image.ref],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "inside: 2.13.0+cpu 3.11" in run.stdout


def test_built_configuration_is_the_dockerfiles(trainer_image: Any, dockerfile: Any, cpu_args: dict[str, str]) -> None:
    """User, entrypoint, workdir, env names and label keys of the built image are the Dockerfile's."""
    cfg = _inspect(trainer_image)["Config"]
    final = dockerfile.final
    assert cfg["User"] == dockerfile.expand(final.values("USER")[-1]) == "0:0"  # the launcher drops to:
    assert "TRAINCTL_TRAINER_UID=10001" in cfg["Env"]
    assert cfg["Entrypoint"] == ["trainer-launch"]
    assert cfg["WorkingDir"] == final.values("WORKDIR")[-1]
    declared_env = set(re.findall(r"(\w+)=", " ".join(final.values("ENV"))))
    assert declared_env <= {e.split("=", 1)[0] for e in cfg["Env"]}
    declared_labels = set(re.findall(r"([\w.]+)=\"", " ".join(final.values("LABEL"))))
    assert declared_labels <= set(cfg["Labels"]), declared_labels - set(cfg["Labels"])
    for key, arg in (("io.trainctl.flavor", "FLAVOR"), ("io.trainctl.torch.version", "TORCH_VER")):
        assert cfg["Labels"][key] == cpu_args[arg]
    assert cfg["Labels"]["org.opencontainers.image.base.name"].startswith("localhost/trainctl-base:bookworm-")


def test_rebuild_with_unchanged_inputs_reuses_every_layer(trainer_image: Any, repo: Path) -> None:
    start = time.monotonic()
    run = subprocess.run(
        ["bash", str(repo / "scripts/image.sh"), "build", "--flavor", "cpu", "--tag", trainer_image.ref],
        capture_output=True,
        text=True,
        timeout=900,
    )
    took = time.monotonic() - start
    assert run.returncode == 0, run.stderr[-3000:]
    assert trainer_image.id in run.stderr, "same inputs, same image id (every layer from the cache)"
    assert took < 120, f"a cached rebuild took {took:.0f}s"


def _layers(image: Any, ref: str) -> dict[str, float]:
    """`podman image tree`'s layers of REF: storage layer id -> size in MB (an id names a layer and its parents)."""
    out = subprocess.run([image.runtime, "image", "tree", ref], capture_output=True, text=True, check=True).stdout
    unit = {"B": 1e-6, "kB": 1e-3, "MB": 1.0, "GB": 1e3}
    return {m[1]: float(m[2]) * unit[m[3]] for m in re.finditer(r"ID: (\w+) Size: +([\d.]+)(B|kB|MB|GB)", out)}


def test_a_trainer_change_rebuilds_a_small_layer_and_reuses_the_venvs(trainer_image: Any, repo: Path,
                                                                       tmp_path: Path) -> None:  # fmt: skip
    """CI building the image after a trainer-only change pushes megabytes, not the 1.1 GB venv: the build context
    (what .dockerignore lets in, and what scripts/image.sh reads) with one trainer module changed builds an image
    whose dependencies' layer is the session image's own."""
    if trainer_image.runtime != "podman":
        pytest.skip("layer sizes come from `podman image tree`")
    ctx = tmp_path / "ctx"
    for part in ("Dockerfile", ".dockerignore", "scripts/image.sh", "sdk/trainctl/version.py"):
        (ctx / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / part, ctx / part)
    shutil.copytree(
        repo / "trainer_image", ctx / "trainer_image", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    init = ctx / "trainer_image/trainer/__init__.py"
    init.write_text(init.read_text() + "# a trainer-only change\n")
    ref = "localhost/trainctl-trainer:trainer-change-test"
    run = subprocess.run(["bash", str(ctx / "scripts/image.sh"), "build", "--flavor", "cpu", "--tag", ref],
                         capture_output=True, text=True, timeout=900)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    try:
        before, after = _layers(trainer_image, trainer_image.ref), _layers(trainer_image, ref)
    finally:
        subprocess.run([trainer_image.runtime, "rmi", ref], capture_output=True, check=False)
    venv = max(before, key=lambda layer: before[layer])
    assert before[venv] > 500 and venv in after, (before, after)  # the dependencies: one layer, reused
    rebuilt = {layer: mb for layer, mb in after.items() if layer not in before}
    assert rebuilt and sum(rebuilt.values()) < 20, rebuilt  # the trainer's wheel, `train`, its install


def test_launcher_unpacks_code_on_the_images_python(trainer_image: Any, tmp_path: Path) -> None:
    """Python 3.11.2 has no extraction filter: the ported rules still extract good code and refuse an escape."""
    for name, members in (("good", ["pkg/train.py"]), ("bad", ["../escape.py"])):
        with tarfile.open(tmp_path / f"{name}.tar.gz", "w:gz") as tar:
            for member in members:
                info = tarfile.TarInfo(member)
                info.size = 2
                tar.addfile(info, io.BytesIO(b"1\n"))
    tmp_path.chmod(0o777)
    code = (
        "import sys, trainer.untar as u\n"
        "assert sys.version_info[:3] < (3, 11, 4), sys.version\n"
        "u.extract('/in/good.tar.gz', '/tmp/out'); print(open('/tmp/out/pkg/train.py').read().strip())\n"
        "try:\n    u.extract('/in/bad.tar.gz', '/tmp/out2/x')\nexcept u.UnsafeMember as e:\n    print('refused', e)\n"
    )
    run = _run(
        trainer_image,
        "--read-only",
        "-v",
        f"{tmp_path}:/in:ro",
        "--entrypoint",
        "python",
        trainer_image.ref,
        "-c",
        code,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == "1"
    assert "refused '../escape.py'" in run.stdout


def test_trains_digits_as_10001_on_a_read_only_root(trainer_image: Any, repo: Path, tmp_path: Path) -> None:
    data = repo / "examples/data/digits"
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    for d in (out, ckpt):
        d.mkdir()
        d.chmod(0o777)
    run = _run(
        trainer_image,
        "--user",
        "10001:10001",
        "--read-only",
        "-e",
        "OMP_NUM_THREADS=1",
        "-v",
        f"{data}:/data:ro",
        "-v",
        f"{out}:/out",
        "-v",
        f"{ckpt}:/ckpt",
        trainer_image.ref,
        *("--nproc-per-node", "2", "--max-restarts", "0", "--", "python", "-m", "trainer.train"),
        *("--model", "digits", "--epochs", "8", "--lr", "0.003", "--warmup-steps", "10"),
        *("--train-data", "/data/train.jsonl", "--val-data", "/data/val.jsonl"),
        *("--checkpoint-dir", "/ckpt", "--checkpoint-every", "50", "--output-dir", "/out"),
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert summary["val_accuracy"] > 0.9, summary
    assert {p.stat().st_uid for p in out.iterdir()} == {10001}
