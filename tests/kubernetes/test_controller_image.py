"""The controller's image (controller.Dockerfile, `scripts/image.sh build --image controller`), built for real
and run as the cluster would run it: a non-root container on a read-only root filesystem, with no torch,
that reaches the test API server and takes the lock. Its retries themselves are test_controller.py's."""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_testlib import Operators
from trainctl.targets.kubernetes.cluster import connect
from trainctl.targets.kubernetes.presence import controller_for

pytestmark = [pytest.mark.kapi, pytest.mark.slow]


def self_contained(kubeconfig: Path, folder: Path) -> Path:
    """The kubeconfig with its certificate files inlined (`*-data`), readable by the container's user 10001."""
    doc = yaml.safe_load(kubeconfig.read_text())
    for entry, keys in (("clusters", ("certificate-authority",)), ("users", ("client-certificate", "client-key"))):
        for item in doc[entry]:
            inner = item["cluster" if entry == "clusters" else "user"]
            for key in keys:
                inner[f"{key}-data"] = base64.b64encode(Path(inner.pop(key)).read_bytes()).decode()
    folder.mkdir(mode=0o755, exist_ok=True)
    folder.chmod(0o755)
    out = folder / "kubeconfig"
    out.write_text(yaml.safe_dump(doc))
    out.chmod(0o644)
    return out


@pytest.fixture
def container(controller_image: Any, operators: Operators, kapi: Path, tmp_path: Path) -> Iterator[str]:
    name = f"trainctl-controller-{operators.ns}"
    tmp_path.chmod(0o755)
    config = self_contained(kapi, tmp_path / "sa")
    run = [controller_image.runtime, "run", "-d", "--name", name, "--network", "host", "--read-only",
           "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "-v", f"{config.parent}:/var/run/kube:ro",
           "-e", "KUBECONFIG=/var/run/kube/kubeconfig", "-e", f"POD_NAMESPACE={operators.ns}", "-e", f"POD_NAME={name}",
           controller_image.ref, "--namespace", operators.ns, "--lease-seconds", "4", "--renew-seconds", "3",
           "--retry-seconds", "1"]  # fmt: skip
    subprocess.run(run, check=True, capture_output=True, timeout=60)
    try:
        yield name
    finally:
        subprocess.run([controller_image.runtime, "rm", "-f", name], capture_output=True, timeout=60)


def test_the_controller_image_runs_the_controller(
    controller_image: Any, container: str, operators: Operators, kapi: Path
) -> None:
    rt, ref = controller_image.runtime, controller_image.ref
    probe = "import importlib.util as u, os; print(u.find_spec('torch') is None, u.find_spec('kubernetes') is not None, os.getuid())"
    inside = subprocess.run([rt, "run", "--rm", "--entrypoint", "python3.11", ref, "-c", probe],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert inside.stdout.split() == ["True", "True", "10001"], inside.stdout + inside.stderr
    size = int(subprocess.run([rt, "image", "inspect", ref, "--format", "{{.Size}}"], capture_output=True, text=True,
                              check=True).stdout)  # fmt: skip
    assert size < 600 * 2**20, f"the controller image is {size / 2**20:.0f} MiB"  # the trainer's is gigabytes
    cluster = connect(None, operators.ns, str(kapi))
    deadline = time.monotonic() + 60
    while not (found := controller_for(cluster, operators.ns, operators.ns)).answers:
        logs = subprocess.run([rt, "logs", container], capture_output=True, text=True).stderr
        assert time.monotonic() < deadline, f"{found.words}\n{logs[-2000:]}"
        time.sleep(0.5)
    assert container in found.words
