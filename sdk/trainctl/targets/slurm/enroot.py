"""The job's image as pyxis hands it to enroot: `[REGISTRY#]IMAGE[:TAG]`, not Docker's `REGISTRY/IMAGE:TAG`.

pyxis prefixes `--container-image` with `docker://` (NVIDIA/pyxis pyxis_slurmstepd.c,
`enroot_container_create`) and enroot parses `docker://[USER@][REGISTRY#]IMAGE[:TAG]` (NVIDIA/enroot
src/docker.sh, `docker::import` up to 3.5; `docker::_parse_uri` from 4.0). Before 4.0 there is no
Docker-style registry: `ghcr.io/trainctl/trainer` is an image name looked up on Docker Hub, and the tag
pattern `[[:alnum:]._:-]+` takes no `@sha256:` digest. The `#` form means the same to every enroot
release; 4.0 and newer also take `REGISTRY#IMAGE[:TAG]@sha256:...`. Pure: no I/O.
"""

from __future__ import annotations

_DOCKER_HUB = ("docker.io", "index.docker.io", "registry-1.docker.io")


def split_registry(image: str) -> tuple[str, str]:
    """(registry, the rest) by Docker's rule: the first path part is a registry when it has a `.` or a `:`
    or is `localhost` (distribution/reference normalize.go, splitDockerDomain); ("", image) on Docker Hub."""
    first, slash, rest = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return ("", rest) if first in _DOCKER_HUB else (first, rest)
    return "", image


def enroot_reference(image: str) -> str:
    """The `--container-image` value for pyxis: `ghcr.io/a/b:1` -> `ghcr.io#a/b:1`; a Docker Hub image
    keeps no registry (`docker.io/library/ubuntu:22.04` -> `library/ubuntu:22.04`), enroot's default."""
    registry, rest = split_registry(image)
    return f"{registry}#{rest}" if registry else rest


def digest_note(image: str) -> str | None:
    """The render note for an image pinned by digest, which enroot before 4.0 cannot parse; None for a tag."""
    if "@sha256:" not in image:
        return None
    return (
        f"pyxis: the image is pinned by digest ({enroot_reference(image)}): enroot 4.0 or newer pulls it by that "
        "digest; enroot 3.x takes only [REGISTRY#]IMAGE[:TAG] (src/docker.sh, docker::import) and stops with "
        "'Invalid image reference' before the job starts: on such a cluster name the image by a tag (image: REPO:TAG)"
    )
