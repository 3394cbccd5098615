"""Fixtures for the Kubernetes target: a tmp TRAINCTL_HOME and the real test API server (kapi)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # k8s_testlib (pytest runs with --import-mode=importlib)


@pytest.fixture(autouse=True)
def _trainctl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "trainctl-home"
    monkeypatch.setenv("TRAINCTL_HOME", str(home))
    return home
