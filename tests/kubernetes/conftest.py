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


@pytest.fixture(scope="session")
def cluster(kapi: Path) -> Iterator[object]:
    """The test API server with trainctl's ClusterTrainingRuntimes (k8s/) installed, strictly validated."""
    import yaml
    from k8s_testlib import REPO, Cluster

    c = Cluster(kapi)
    for rt in yaml.safe_load_all((REPO / "k8s" / "trainingruntimes.yaml").read_text()):
        c.custom.create_cluster_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", rt, field_validation="Strict"
        )
    yield c


@pytest.fixture
def operators(cluster: object, tmp_path: Path) -> object:
    """A fresh namespace on the cluster and a pod runner (the test kubelet) writing under tmp_path."""
    from k8s_testlib import Operators

    return Operators(cluster, tmp_path)  # type: ignore[arg-type]
