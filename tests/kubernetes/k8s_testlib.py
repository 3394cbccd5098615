"""Validators for rendered manifests: the PyTorchJob CRD schema (from ../shared) and the Kubernetes pod schema."""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("TRAINCTL_SHARED", REPO.parent / "shared"))
CRD_PATH = SHARED / "schemas" / "kubeflow.org_pytorchjobs.v1.9.0.yaml"
TRAINJOB_CRD_PATH = SHARED / "schemas" / "trainer.kubeflow.org_trainjobs.v2.3.0.yaml"
KAPI = SHARED / "tools" / "kapi"
KUBE_VERSION = "1.37.0"
ENABLE_HINT = (
    "needs ../shared next to the repository (schemas/ and tools/kapi/): check it out beside the repo "
    "or set TRAINCTL_SHARED=/path/to/shared"
)


def require_shared(path: Path) -> None:
    """Skip (or, in CI, fail) when the shared test data is missing."""
    if path.exists():
        return
    message = f"{path} not found: {ENABLE_HINT}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@functools.cache
def crd_validator(path: Path = CRD_PATH) -> jsonschema.Draft7Validator:
    require_shared(path)
    crd = yaml.safe_load(path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    schema = version["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def crd_errors(manifest: dict[str, Any]) -> list[str]:
    path = TRAINJOB_CRD_PATH if manifest.get("kind") == "TrainJob" else CRD_PATH
    return [
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in crd_validator(path).iter_errors(manifest)
    ]


@functools.cache
def runtimes() -> dict[str, dict[str, Any]]:
    """trainctl's ClusterTrainingRuntimes (k8s/trainingruntimes.yaml) by name."""
    docs = yaml.safe_load_all((REPO / "k8s" / "trainingruntimes.yaml").read_text())
    return {d["metadata"]["name"]: d for d in docs if d}


def pod_template_errors(template: dict[str, Any]) -> list[str]:
    """Strict Kubernetes validation of a pod template (unknown fields are errors)."""
    doc = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
    try:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"]
    return []


def assert_valid(manifest: dict[str, Any]) -> None:
    """The CRD schema accepts the manifest, and every pod template it makes passes strict Kubernetes
    validation and Pod Security "restricted". A TrainJob's pods are what the Trainer v2.3.0 port builds
    from it and trainctl's runtime (k8s/)."""
    from port_pss import violations
    from port_trainer import build_jobset

    problems = crd_errors(manifest)
    if manifest["kind"] == "TrainJob":
        runtime = runtimes()[manifest["spec"]["runtimeRef"]["name"]]
        js = build_jobset(copy.deepcopy(manifest), runtime)
        templates = {r["name"]: r["template"]["spec"]["template"] for r in js["spec"]["replicatedJobs"]}
    else:
        templates = {t: r["template"] for t, r in manifest["spec"]["pytorchReplicaSpecs"].items()}
    for rtype, template in templates.items():
        problems += [f"{rtype}: {p}" for p in pod_template_errors(template)]
        problems += [f"{rtype}: restricted: {p}" for p in violations(template["spec"])]
    assert not problems, "\n".join(problems)


def start_kapi(directory: Path) -> Path:
    """Start ../shared/tools/kapi in `directory`; the kubeconfig path. Fails (never skips) if it cannot start."""
    import subprocess

    require_shared(KAPI / "up.sh")
    proc = subprocess.run(
        ["bash", str(KAPI / "up.sh"), str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        stop_kapi(directory)
        log = (directory / "kapi.log").read_text()[-2000:] if (directory / "kapi.log").exists() else ""
        pytest.fail(f"the test API server did not start (up.sh exit {proc.returncode}):\n{proc.stderr}\n{log}")
    return directory / "kubeconfig"


def stop_kapi(directory: Path) -> None:
    import subprocess

    subprocess.run(["bash", str(KAPI / "down.sh"), str(directory)], capture_output=True, timeout=60, check=False)


class Cluster:
    """Clients for the test API server."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client, config

        self.kubeconfig = kubeconfig
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)


class Operators:
    """The ported operators for one test: a namespace of its own, and the pod runner."""

    _count = 0

    def __init__(self, cluster: Cluster, workdir: Path, image_runtime: str | None = None) -> None:
        from pod_runner import PodRunner

        Operators._count += 1
        self.cluster = cluster
        self.ns = f"t{os.getpid() % 10000}-{Operators._count}"
        cluster.core.create_namespace({"metadata": {"name": self.ns}})
        self.runner = PodRunner(cluster.core, self.ns, workdir, image_runtime)

    def trainer(self) -> Any:
        from port_trainer import TrainerController

        return TrainerController(self.cluster.api, self.ns, self.runner)

    def run_trainjob(self, trainjob: dict[str, Any], timeout: float = 600) -> tuple[dict[str, Any], Any]:
        """Create the TrainJob (strict validation) and run it with the Trainer port; (final object, controller).
        One at a time per machine: every TrainJob's rendezvous port is the Trainer's fixed 29500."""
        import fcntl

        trainjob = {**trainjob, "metadata": {**trainjob["metadata"], "namespace": self.ns}}
        self.cluster.custom.create_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", self.ns, "trainjobs", trainjob, field_validation="Strict"
        )
        with open("/tmp/trainctl-port-29500.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            ctl = self.trainer()
            final = ctl.run(trainjob["metadata"]["name"], timeout=timeout)
        return final, ctl

    def pytorchjob(self) -> Any:
        from port_pytorchjob import PyTorchJobController

        return PyTorchJobController(self.cluster.api, self.ns, self.runner)

    def run(self, kind: str, name: str, timeout: float = 600) -> tuple[dict[str, Any], Any]:
        """Run an applied TrainJob ("trainjob") or PyTorchJob with its operator's port; (final object,
        controller). One at a time per machine: pods of every job share this machine's ports."""
        import fcntl

        with open("/tmp/trainctl-port-29500.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            ctl = self.trainer() if kind == "trainjob" else self.pytorchjob()
            return ctl.run(name, timeout=timeout), ctl

    def claim(self, name: str = "trainctl-checkpoints") -> Path:
        """The host directory behind a PersistentVolumeClaim (shared by every pod of this test)."""
        path = self.runner.claims / name
        path.mkdir(parents=True, exist_ok=True)
        return path


@contextlib.contextmanager
def helper_pods_run(operators: Operators, selector: str) -> Iterator[list[dict[str, Any]]]:
    """The test kubelet for short-lived helper pods (`k8s cp-data`'s copy pod, `pull`'s reader pod): runs each pod
    matching `selector` that the API server holds, once, to its end; yields the pods it ran."""
    ran: list[dict[str, Any]] = []
    stop = threading.Event()
    core = operators.cluster.core

    def loop() -> None:
        seen: set[str] = set()
        while not stop.is_set():
            for found in core.list_namespaced_pod(operators.ns, label_selector=selector).items:
                if found.metadata.name in seen:
                    continue
                seen.add(found.metadata.name)
                pod = core.api_client.sanitize_for_serialization(found)
                ran.append(pod)
                rp = operators.runner.start(pod)
                while (code := operators.runner.poll(rp)) is None:
                    time.sleep(0.2)
                operators.runner.finish(rp, "Succeeded" if code == 0 else "Failed")
            time.sleep(0.2)

    with contextlib.ExitStack() as later:  # on the way out: stop the loop, then wait for it (last in, first out)
        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        later.callback(thread.join, 10)
        later.callback(stop.set)
        yield ran
