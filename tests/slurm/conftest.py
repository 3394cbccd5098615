"""A real SLURM cluster on this machine for the session: 2 virtual nodes x 4 CPUs (scripts/slurm-cluster.sh).

In CI (`CI=true`) a cluster that cannot start fails the tests; elsewhere they skip and say why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
START = ROOT / "scripts" / "slurm-cluster.sh"
STOP = ROOT / "scripts" / "slurm-cluster-stop.sh"
NODES = 2
CPUS_PER_NODE = 4


@dataclass(frozen=True)
class Cluster:
    nodes: list[str]
    cpus_per_node: int
    python_env: str
    """The venv running the tests: its bin/ has trainer-launch (CI's is <clone>/.venv)."""


def _unavailable(message: str) -> NoReturn:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"SLURM test cluster unavailable in CI: {message}", pytrace=False)
    pytest.skip(f"SLURM test cluster unavailable: {message}")


@pytest.fixture(scope="session")
def cluster(slurm_cluster_lock: None) -> Iterator[Cluster]:
    if os.geteuid() != 0:
        _unavailable("scripts/slurm-cluster.sh needs root (it installs packages and starts munged/slurmctld/slurmd)")
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", str(START), str(NODES), str(CPUS_PER_NODE)], capture_output=True, text=True, timeout=600
        )
    except subprocess.TimeoutExpired:
        _unavailable("scripts/slurm-cluster.sh did not finish within 600 s")
    if done.returncode != 0:
        _unavailable(f"scripts/slurm-cluster.sh exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    print(f"slurm cluster up in {time.monotonic() - started:.1f}s", file=sys.stderr)
    try:
        yield Cluster(nodes=[f"n{i}" for i in range(1, NODES + 1)], cpus_per_node=CPUS_PER_NODE, python_env=sys.prefix)
    finally:
        subprocess.run(["bash", str(STOP)], capture_output=True, timeout=120)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private run registry for the test."""
    path = tmp_path / "trainctl-home"
    monkeypatch.setenv("TRAINCTL_HOME", str(path))
    return path


@pytest.fixture(scope="session")
def digits_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("digits")
    subprocess.run([sys.executable, "-m", "trainer.examples.digits_data", str(out)], check=True, timeout=120)
    return out


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
