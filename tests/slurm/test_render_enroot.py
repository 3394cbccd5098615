"""pyxis's `--container-image` read by enroot's own parser (issue 37, section 3).

pyxis prefixes the value with `docker://` (NVIDIA/pyxis pyxis_slurmstepd.c, `enroot_container_create`), and
enroot parses `docker://[USER@][REGISTRY#]IMAGE[:TAG]` (NVIDIA/enroot src/docker.sh: the regular expression of
`docker::import` in v3.5.0, `docker::_parse_uri` in v4.1.2). tests/support/enroot_uri.sh holds both, copied
from that file, and runs them in bash on the reference the render wrote: the registry, image and tag enroot
pulls must be the ones the job names.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from trainctl import Job
from trainctl.targets.slurm.enroot import enroot_reference, split_registry

ENROOT_URI = Path(__file__).resolve().parents[1] / "support" / "enroot_uri.sh"
DIGEST = "sha256:" + "0123456789abcdef" * 4
HUB = "registry-1.docker.io"

# image -> (registry, image, tag) enroot must pull it as
CASES = {
    "ghcr.io/trainctl/trainer:0.1.0": ("ghcr.io", "trainctl/trainer", "0.1.0"),
    "nvcr.io/nvidia/pytorch:24.05-py3": ("nvcr.io", "nvidia/pytorch", "24.05-py3"),
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/team/trainer:v2": (
        "123456789012.dkr.ecr.us-east-1.amazonaws.com", "team/trainer", "v2",
    ),
    "localhost:5000/team/trainer:dev": ("localhost:5000", "team/trainer", "dev"),
    "localhost/trainer:1": ("localhost", "trainer", "1"),
    "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime": (HUB, "pytorch/pytorch", "2.3.0-cuda12.1-cudnn8-runtime"),
    "ubuntu:22.04": (HUB, "library/ubuntu", "22.04"),
    "ubuntu": (HUB, "library/ubuntu", "latest"),
    "docker.io/library/ubuntu:22.04": (HUB, "library/ubuntu", "22.04"),
    "index.docker.io/pytorch/pytorch": (HUB, "pytorch/pytorch", "latest"),
}  # fmt: skip
PINNED = {
    f"ghcr.io/trainctl/trainer@{DIGEST}": ("ghcr.io", "trainctl/trainer", DIGEST),
    f"ghcr.io/trainctl/trainer:0.1.0@{DIGEST}": ("ghcr.io", "trainctl/trainer", DIGEST),  # enroot: the digest wins
    f"localhost:5000/trainer@{DIGEST}": ("localhost:5000", "trainer", DIGEST),
}


def pyxis_job(image: str) -> Job:
    return Job.parse(
        {"name": "pyxis", "image": image, "command": ["python", "-c", "pass"], "slurm": {"container": "pyxis"}}
    )


def rendered_reference(image: str) -> tuple[str, tuple[str, ...]]:
    """(the `--container-image` value as srun receives it, after the shell's quoting; the render's notes)."""
    rendered = pyxis_job(image).render("slurm")
    words = shlex.split(rendered.text.replace("\\\n", " "), comments=True)  # a comment is no word srun gets
    found = [w.removeprefix("--container-image=") for w in words if w.startswith("--container-image=")]
    assert len(found) == 1, rendered.text
    return found[0], rendered.notes


def enroot(version: int, reference: str) -> subprocess.CompletedProcess[str]:
    """enroot's parse of the URI pyxis makes of `reference` (pyxis: `docker://%s`)."""
    argv = ["bash", str(ENROOT_URI), f"enroot{version}_parse", f"docker://{reference}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def parsed(version: int, reference: str) -> tuple[str, str, str]:
    done = enroot(version, reference)
    assert done.returncode == 0, f"enroot {version} refused {reference!r}: {done.stderr}"
    _user, registry, image, tag = done.stdout.split("\n")[:4]
    return registry, image, tag


@pytest.mark.parametrize("image", sorted(CASES))
@pytest.mark.parametrize("version", [3, 4])
def test_every_enroot_pulls_the_image_the_job_names(image: str, version: int) -> None:
    reference, notes = rendered_reference(image)
    assert parsed(version, reference) == CASES[image]
    assert not any("digest" in n for n in notes)


@pytest.mark.parametrize("image", sorted(PINNED))
def test_a_digest_is_pulled_by_enroot_4_and_the_render_says_how_on_enroot_3(image: str) -> None:
    reference, notes = rendered_reference(image)
    assert parsed(4, reference) == PINNED[image]
    refused = enroot(3, reference)  # enroot 3's tag pattern has no '@': a digest-pinned image cannot be named
    assert refused.returncode == 1 and "Invalid image reference" in refused.stderr
    (note,) = [n for n in notes if "digest" in n]
    assert reference in note and "enroot 4.0 or newer" in note and "enroot 3.x" in note and "tag" in note


def test_dockers_form_is_what_enroot_3_looks_up_on_docker_hub() -> None:
    """Why the render rewrites the reference: the Docker form names a Docker Hub image on enroot 3."""
    assert parsed(3, "ghcr.io/trainctl/trainer:0.1.0") == (HUB, "ghcr.io/trainctl/trainer", "0.1.0")


def test_registry_split_follows_docker() -> None:
    """distribution/reference normalize.go, splitDockerDomain: a first part with '.' or ':', or `localhost`."""
    assert split_registry("my.reg/a/b") == ("my.reg", "a/b")
    assert split_registry("team/trainer") == ("", "team/trainer")
    assert split_registry("docker.io/team/trainer:1") == ("", "team/trainer:1")
    assert enroot_reference("localhost:5000/a:1") == "localhost:5000#a:1"


def test_only_pyxis_is_rewritten() -> None:
    """apptainer and podman take Docker's form (`docker://ghcr.io/...`, a podman image name)."""
    for container in ("apptainer", "podman"):
        job = Job.parse({**pyxis_job("ghcr.io/t/trainer:1").to_dict(), "slurm": {"container": container}})
        text = job.render("slurm").text
        assert "ghcr.io/t/trainer:1" in text and "ghcr.io#" not in text
