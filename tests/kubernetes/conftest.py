"""Fixtures for the Kubernetes target: a tmp TRAINCTL_HOME and the real test API server (kapi)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # k8s_testlib (pytest runs with --import-mode=importlib)


@pytest.fixture(autouse=True)
def _trainctl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "trainctl-home"
    monkeypatch.setenv("TRAINCTL_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def kapi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real API server with the PyTorchJob CRD (../shared/tools/kapi); yields its kubeconfig."""
    from k8s_testlib import start_kapi, stop_kapi

    directory = tmp_path_factory.mktemp("kapi")
    kubeconfig = start_kapi(directory)
    try:
        yield kubeconfig
    finally:
        stop_kapi(directory)


@pytest.fixture
def kubeconfig(kapi: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KUBECONFIG", str(kapi))
    return kapi
