"""`--resume-from` a Kubernetes run onto Kubernetes, on the same PVC (pure): the new run's pods copy the source
run's checkpoints into their own checkpoint folder before the launcher starts, so nothing passes through
the machine running trainctl (a PVC can only be read from a pod).

The container's command becomes `sh -c SEED trainctl-seed SOURCE DEST [all] -- <the launcher's argv>`: when
DEST holds no checkpoint yet (the run's first start; a restart finds its own and copies nothing), each of
SOURCE's `step-*` folders (a `command:` job's: everything in it) is copied beside DEST as `.seed-*-<host>`
and renamed into place, so nodes that copy at once never see a half-copied folder, and the first rename
wins. The trainer then resumes from the newest that verifies, and logs each changed setting.
"""

from __future__ import annotations

import copy
from typing import Any

SEED = r"""src=$1 dest=$2 what=$3
shift 4
mkdir -p "$dest"
if ! ls -A "$dest" | grep -q .; then
  if [ "$what" = all ]; then set -- "$src"/* "$src"/.[!.]* -- "$@"; else set -- "$src"/step-* -- "$@"; fi
  while [ "$1" != -- ]; do
    if [ -e "$1" ]; then
      name=${1##*/}
      tmp="$dest/.seed-$name-$(hostname)"
      if cp -R "$1" "$tmp"; then mv -T "$tmp" "$dest/$name" 2>/dev/null || rm -rf "$tmp"; fi
    fi
    shift
  done
  shift
  echo "trainctl: copied the checkpoints of $src into $dest ($(ls "$dest" | tr '\n' ' '))" >&2
fi
exec "$@"
"""


def wrapped(command: list[str], source: str, dest: str, whole: bool) -> list[str]:
    """The launcher's argv behind the seed step (every `$` doubled: kubelet expands `$(VAR)` in commands)."""
    words = ["sh", "-c", SEED, "trainctl-seed", source, dest, "all" if whole else "steps", "--"]
    return [w.replace("$", "$$") for w in words] + command


def unwrapped(command: list[str]) -> list[str]:
    """The launcher's argv of a container command, without the seed step `wrapped` put in front of it."""
    if command[:2] == ["sh", "-c"] and len(command) > 3 and command[3] == "trainctl-seed" and "--" in command:
        return command[command.index("--") + 1 :]
    return command


def seeded(manifest: dict[str, Any], source: str, dest: str, whole: bool) -> dict[str, Any]:
    """The TrainJob or PyTorchJob whose trainer containers seed `dest` from `source` first (instead of what
    they seeded from before: a retry of a `--resume-from` run copies its previous attempt's)."""
    out = copy.deepcopy(manifest)
    spec = out["spec"]
    if out["kind"] == "TrainJob":
        spec["trainer"]["command"] = wrapped(unwrapped(spec["trainer"]["command"]), source, dest, whole)
    else:
        for replica in spec["pytorchReplicaSpecs"].values():
            container = replica["template"]["spec"]["containers"][0]
            container["command"] = wrapped(unwrapped(container["command"]), source, dest, whole)
    return out
