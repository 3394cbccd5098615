"""A real SLURM cluster on this machine: 2 virtual nodes x 4 CPUs (scripts/slurm-cluster.sh), or, for the
tests that ask for `netns_cluster` (tests/conftest.py), 3 nodes that are hosts to each other (--netns).

In CI (`CI=true`) a cluster that cannot start fails the tests; elsewhere they skip and say why.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from digits import make_digits  # tests/support
from slurm_cluster import PLAIN, Cluster, SlurmClusters


@pytest.fixture
def cluster(slurm_clusters: SlurmClusters) -> Cluster:
    """The session's cluster in the plain shape (started once; again only after a test used another shape)."""
    return slurm_clusters.up(PLAIN)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private run registry for the test."""
    path = tmp_path / "trainctl-home"
    monkeypatch.setenv("TRAINCTL_HOME", str(path))
    return path


@pytest.fixture(scope="session")
def digits_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_digits(tmp_path_factory.mktemp("digits"))


@dataclass(frozen=True)
class FakeSsh:
    """An ssh stand-in for `slurm.login`: records each call's arguments, then runs the remote command here
    with a login shell's plain PATH (what `ssh host CMD` gives), so no command borrows the test's PATH."""

    command: Path
    record: Path

    def calls(self) -> list[list[str]]:
        return [json.loads(line) for line in self.record.read_text().splitlines()] if self.record.exists() else []

    def forget(self) -> None:
        self.record.write_text("")


@pytest.fixture
def fake_ssh(tmp_path: Path) -> FakeSsh:
    record, command = tmp_path / "ssh-calls.jsonl", tmp_path / "fake-ssh"
    command.write_text(
        "#!/usr/bin/python3\n"
        "import json, os, sys\n"
        f"with open({str(record)!r}, 'a') as f: f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "os.environ['PATH'] = '/usr/local/bin:/usr/bin:/bin'\n"
        "os.execv('/bin/sh', ['sh', '-c', sys.argv[-1]])\n"
    )
    command.chmod(0o755)
    return FakeSsh(command, record)


@pytest.fixture
def no_host_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The batch host of issue 37 section 4: the first `python3` on the PATH the job inherits exits 1 (sbatch's
    default `--export=ALL` hands this process's environment to the batch script), as on a host whose python3 is
    too old or absent. The job's own tools (trainer-launch, `python`) come after it on PATH, so jobs that use this
    set no slurm.python_env (which would put the venv's python3 first). The fake's folder."""
    bin_dir = tmp_path / "host-bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text("#!/bin/sh\necho 'python3: no usable Python on this host' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]]))
    return bin_dir
