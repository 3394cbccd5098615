"""`--dist loadgroup` that works on pytest 9 (scripts/test.sh runs the suite on pytest-xdist workers).

pytest-xdist 3.8's loadgroup learns a test's xdist_group by a suffix it writes into `item._nodeid` on each
worker; pytest 9 keeps a node's id in `item._id`, so the suffix is lost and every test is scheduled on its own:
the SLURM cluster's tests would spread over all workers, and all but one would wait on the cluster's lock for
the other worker's whole session. Here the workers write {nodeid: group} to a file the controller named
(GROUPS_ENV), and the controller's scheduler reads it when it splits the collection into work units.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

GROUPS_ENV = "TRAINCTL_XDIST_GROUPS"
NAMED = pytest.StashKey[Path]()


def name_groups_file(config: pytest.Config) -> None:
    """In the controller of an xdist run (before the workers start): the file the workers will write."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    path = Path(tempfile.mkdtemp(prefix="trainctl-xdist-")) / "groups.json"
    os.environ[GROUPS_ENV] = str(path)
    config.stash[NAMED] = path


def remove_groups_file(config: pytest.Config) -> None:
    """In the controller that named the file, when the run ends: the file and its folder go."""
    if (path := config.stash.get(NAMED, None)) is not None:
        shutil.rmtree(path.parent, ignore_errors=True)


def write_groups(config: pytest.Config, groups: dict[str, str]) -> None:
    """In a worker: every grouped test's nodeid and group (all workers collect the same, so the last wins)."""
    path = os.environ.get(GROUPS_ENV)
    if not path or not hasattr(config, "workerinput"):
        return
    tmp = Path(f"{path}.{config.workerinput['workerid']}")
    tmp.write_text(json.dumps(groups))
    os.replace(tmp, path)


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The controller's scheduler for --dist loadgroup: xdist's own, with the groups read from the file."""
    from xdist.scheduler import LoadGroupScheduling

    class FileGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            scope = str(super()._split_scope(nodeid))
            if scope != nodeid:  # an xdist that keeps its @group suffix
                return scope
            if self._groups is None:  # the workers have all collected before the first split
                path = os.environ.get(GROUPS_ENV)
                self._groups = json.loads(Path(path).read_text()) if path and Path(path).exists() else {}
            return self._groups.get(nodeid, nodeid)

    return FileGroupScheduling(config, log)
