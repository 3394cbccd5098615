"""Started as root in the image: hand SageMaker's /opt/ml to the trainer user, then become it.

Why the image starts as root at all: SageMaker (and the SageMaker SDK's local mode) cannot pass a
user, runs the image's USER, and mounts /opt/ml's folders as root (the SDK's local folders are mode
0700), so a non-root image could neither read its channels nor write its model. Every other target
passes the trainer user itself (`--user 10001`, `runAsUser: 10001`), and then this is a no-op. So the
image is the same everywhere (one image ID) and nothing of a job ever runs as root.

The drop happens only in the image, which sets TRAINCTL_TRAINER_UID; on a host (tests, the local
target) the launcher runs as whoever started it. TRAINCTL_KEEP_ROOT=1 keeps root (a debugging aid).
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

UID_ENV = "TRAINCTL_TRAINER_UID"
KEEP_ROOT_ENV = "TRAINCTL_KEEP_ROOT"
# What SageMaker mounts or creates as root; the trainer reads input and code, writes the rest.
SAGEMAKER_DIRS = ("opt/ml/model", "opt/ml/output", "opt/ml/checkpoints", "opt/ml/code", "opt/ml/input")


def _say(message: str) -> None:
    print(f"trainer-launch: {message}", file=sys.stderr, flush=True)


def trainer_account(env: Mapping[str, str]) -> pwd.struct_passwd | None:
    """The account to drop to, or None: not root, not in the image, or asked to keep root."""
    if os.geteuid() != 0 or env.get(KEEP_ROOT_ENV) == "1" or not env.get(UID_ENV):
        return None
    try:
        return pwd.getpwuid(int(env[UID_ENV]))
    except (KeyError, ValueError):
        _say(f"{UID_ENV}={env[UID_ENV]!r} names no user of this image; staying root")
        return None


def hand_over(root: Path, uid: int, gid: int) -> None:
    """chown -R SageMaker's folders (coreutils is fast on large channels); a read-only mount keeps root's."""
    for sub in SAGEMAKER_DIRS:
        path = root / sub
        if not path.exists():
            continue
        done = subprocess.run(["chown", "-R", f"{uid}:{gid}", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            _say(f"could not hand all of {path} to uid {uid} (read-only mount?): {done.stderr.strip()}")


def drop_root(env: Mapping[str, str], root: Path) -> int | None:
    """Become the trainer user (after handing it /opt/ml under `root`); returns its uid if it dropped."""
    account = trainer_account(env)
    if account is None:
        return None
    hand_over(root, account.pw_uid, account.pw_gid)
    os.setgroups(os.getgrouplist(account.pw_name, account.pw_gid))
    os.setgid(account.pw_gid)
    os.setuid(account.pw_uid)
    os.environ.update({"HOME": account.pw_dir, "USER": account.pw_name, "LOGNAME": account.pw_name})
    return account.pw_uid
