"""Which image each node of a run ran, as its engine reported it, and one warning when they differ.

The product promises one image on every node: a run whose pods or nodes report two image IDs broke
that promise (a tag moved between pulls, a node kept an old copy), so status says so in words. Each
target reads the IDs its own way (a pod's `status.containerStatuses[].imageID`, the line a SLURM node
prints); this module only compares and words them, the same way on every target. A leaf: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from .state import Images

NOT_REPORTED = "no image ID reported"
_PREFIXES = ("docker-pullable://", "docker://")


def same_key(image_id: str) -> str:
    """What two reports of one image share: podman prints the bare config digest, a CRI runtime
    `sha256:<digest>`, dockershim prefixed `docker-pullable://` (a repo digest stays as it is)."""
    for prefix in _PREFIXES:
        image_id = image_id.removeprefix(prefix)
    return image_id.removeprefix("sha256:")


def short(image_id: str) -> str:
    """An ID short enough for a line and still telling images apart: 12 hex digits, like podman and docker
    print them (a repo digest keeps its repository)."""
    repo, at, digest = same_key(image_id).rpartition("@")
    return f"{repo}{at}{digest.removeprefix('sha256:')[:12]}"


def image_ids(ids: Mapping[str, str], unit: str) -> Images | None:
    """The status's `images` from {pod or node: image ID} ("" when none was reported): `same` when every
    one reported the same image, `warning` when two or more distinct images were reported."""
    if not ids:
        return None
    reported = {name: i for name, i in ids.items() if i}
    distinct = sorted({same_key(i) for i in reported.values()})
    warning = same = None
    if len(distinct) > 1:
        groups = {key: sorted(n for n, i in reported.items() if same_key(i) == key) for key in distinct}
        said = "; ".join(f"{short(key)} on {', '.join(names)}" for key, names in groups.items())
        warning = (
            f"the {unit}s of this run ran {len(distinct)} different images ({said}): "
            "one image on every node is what trainctl promises; pin the image by digest "
            f"(image: repo@sha256:...) or make every {unit} hold the same copy"
        )
    elif distinct and len(reported) == len(ids):
        same = next(iter(reported.values()))
    return Images(ids=dict(sorted(ids.items())), same=same, warning=warning)


def image_lines(images: Images | None) -> list[str]:
    """The status text for `images`: one line when all agree, one per node otherwise."""
    if images is None or not images.ids:
        return []
    ids = images.ids
    lines = []
    if images.same:
        lines.append(f"image ID: {images.same} (all of {', '.join(ids)})")
    elif not any(ids.values()):
        lines.append(f"image ID: {NOT_REPORTED} ({', '.join(ids)})")
    else:
        lines += [f"image ID of {name}: {i or NOT_REPORTED}" for name, i in ids.items()]
    if images.warning:
        lines.append(f"WARNING: {images.warning}")
    return lines
