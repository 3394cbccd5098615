"""`slurm.container: podman`: the shell text that runs the job's image under srun, one container per
node, and the line each node prints with the ID of the image it holds (read back by `trainctl status`).

Pure, like render.py, which places these lines in the batch script.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ...runs.identity import UID_ENV
from .words import sh

if TYPE_CHECKING:
    from ...spec.job_spec import JobSpec
    from .plan import SlurmPlan

PODMAN_USER = "10001:10001"
"""The image's user; as root the script gives it the checkpoint and output folders."""

NODE_IMAGE_LINE = re.compile(r"^trainctl: node (?P<node>\S+) image (?P<image>\S+) id (?P<id>\S+)\s*$")
"""What each node prints before the launch (`node_image_step`)."""
ATTEMPT_LINE = re.compile(r"^trainctl: job \d+ \(restart \d+\)")
"""What the batch script prints at the start of each attempt (a requeue appends to the same log)."""


def wrapper(job: JobSpec, p: SlurmPlan, mounts: list[str], env: Iterable[str]) -> list[str]:
    """`podman run` of the job's image on each node (srun starts one per node); its words are shell text.

    The SLURM_* variables (podman's `--env 'SLURM_*'`), the rendezvous and every variable the script
    exports (`env`: the job's, the trainer's folders, a `code:` bundle's, provenance) pass by name; data is mounted read-only, the workdir, checkpoints and outputs read-write, each
    at its own path. As root the container runs as 10001; rootless podman keeps the caller's id.
    """
    fixed = {"MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "TRAINCTL_RUN_DIR", UID_ENV}
    names = sorted({*env, *(s.env for s in job.secrets), *fixed})
    data = set(p.data.values())
    words = ["podman", "run", "--rm", '--label=io.trainctl.slurm-job="$SLURM_JOB_ID"', '"${podman_user[@]}"']
    words += ["--read-only", "--network=host", "--pull=never", "--shm-size=1g", "--env='SLURM_*'"]
    words += [f"--env={n}" for n in names]
    for mount in mounts:
        src = mount.split(":")[0]
        words.append(
            shlex.quote(f"--volume={mount}:ro" if src in data and mount.count(":") == 1 else f"--volume={mount}")
        )
    return [*words, shlex.quote(job.image)]


def user_lines(p: SlurmPlan) -> list[str]:
    """As root, the image's user gets the run's folder, its checkpoint, output and work folders (and, for
    `code:`, the workdir, where the requirements' venvs are kept); rootless, the caller's id is kept."""
    code = (p.workdir,) if p.code_bundle else ()
    folders = " ".join(sh(d) for d in dict.fromkeys((p.run_dir, p.checkpoint_dir, p.output_dir, p.work_dir, *code)))
    return [
        "# podman: as root, the image's user 10001 runs the trainer and owns the run's folders"
        + (" and the workdir (venvs are kept there);" if code else ";")
        + " rootless, the caller's own id (--userns=keep-id).",
        f'if [ "$(id -u)" = 0 ]; then podman_user=(--user={PODMAN_USER})',
        f"  chown {PODMAN_USER} -- {folders}",
        "else podman_user=(--userns=keep-id); fi",
    ]


_NODE_CHECK = """node=${SLURMD_NODENAME:-$(hostname)}
image_id=$(podman image inspect --format "{{.Id}}" "$1") || { echo "trainctl: node $node: podman has no image $1 here: \
build it (scripts/image.sh build --flavor cpu) or podman pull it on every node" >&2; exit 1; }
echo "trainctl: node $node image $1 id $image_id\""""


def node_image_step(job: JobSpec) -> list[str]:
    """One srun step, a task per node, before the launch: each node prints the ID of the image its podman
    holds (the ID the container will run: `podman run --pull=never` takes that copy); a node without
    the image fails the job here with podman's words and what to do, before any launcher starts. No
    --kill-on-bad-exit: every node finishes its check, so each missing image is named (a node killed
    because another failed first could lose its own line)."""
    srun = 'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1'
    return [
        "# shellcheck disable=SC2016 # Each node: the ID of the image its podman holds (`trainctl status` compares"
        " them); the quoted script runs there.",
        f"{srun} bash -c {shlex.quote(_NODE_CHECK)} trainctl-image {shlex.quote(job.image)}",
    ]


def node_image_ids(lines: Iterable[str]) -> dict[str, str]:
    """{node: image ID} from the job's log, the latest attempt's lines only (a requeued job may run on
    other nodes; its earlier attempts' lines stay in the appended log)."""
    ids: dict[str, str] = {}
    for line in lines:
        if ATTEMPT_LINE.match(line):
            ids = {}
        elif found := NODE_IMAGE_LINE.match(line):
            ids[found["node"]] = found["id"]
    return ids
