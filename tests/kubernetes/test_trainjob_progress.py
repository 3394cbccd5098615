"""A TrainJob's progress through Kubeflow Trainer v2.3.0's own channel (alpha gate `TrainJobStatus`):
the controller's plugin wires trainctl's trainer container to its status server (port_statusserver.py,
ported from trainjobstatus.go and pkg/statusserver), the real trainer POSTs `trainerStatus`, the real API
server validates it against the v2.3.0 TrainJob CRD, and `trainctl status` reads it back.

What this machine does not exercise: the projected service-account token and the CA arrive in the pod
through a projected volume the test kubelet does not implement, so the trainer here runs as a plain process
given those two files and the variables the plugin sets; the URL's host is 127.0.0.1 (no cluster DNS).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from digits import example_digits  # tests/support
from k8s_testlib import Cluster, runtimes
from port_statusserver import ENV_CA, ENV_TOKEN, ENV_URL, StatusServer, enforce_ml_policy, env_vars, self_signed
from port_trainer import build_jobset
from trainctl import Job
from trainctl.submit.bundle import prepare
from trainer.training import kubeflow_status

ROOT = Path(__file__).resolve().parents[2]
SERVICE, OPERATOR_NS, PORT = "kubeflow-trainer-controller-manager", "kubeflow-system", 10443


@pytest.fixture(scope="module")
def digits_data() -> Path:
    return example_digits()


def _trainjob(name: str, namespace: str) -> dict[str, Any]:
    overrides = [f"name={name}", f"kubernetes.namespace={namespace}"]
    job = prepare(Job.from_yaml(ROOT / "examples" / "digits.yaml").with_overrides(overrides))
    manifest: dict[str, Any] = job.render("kubernetes").native
    manifest["metadata"]["namespace"] = namespace
    return manifest


def test_the_plugin_reaches_the_container_that_runs_the_trainer(digits_data: Path) -> None:
    trainjob = _trainjob("progress", "team")
    jobset = build_jobset(trainjob, runtimes()[trainjob["spec"]["runtimeRef"]["name"]])
    enforce_ml_policy(jobset, trainjob, SERVICE, OPERATOR_NS, PORT)
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    launcher = next(
        c for c in pod["containers"] if "trainer-launch" in " ".join(c.get("command", []) + c.get("args", []))
    )
    env = {e["name"]: e.get("value") for e in launcher["env"]}
    # the names the trainer reads are the names the plugin sets (trainjobstatus.go createEnvVars)
    assert (kubeflow_status.URL_ENV, kubeflow_status.CA_ENV, kubeflow_status.TOKEN_ENV) == (ENV_URL, ENV_CA, ENV_TOKEN)
    assert (
        env[ENV_URL]
        == f"https://{SERVICE}.{OPERATOR_NS}.svc:{PORT}/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/progress/status"
    )
    assert env[ENV_CA] == "/var/run/secrets/kubeflow/trainer/ca.crt" and env[ENV_TOKEN].endswith("/token")
    assert any(v["name"] == "kubeflow-trainer-token" and "projected" in v for v in pod["volumes"])


@pytest.mark.slow
@pytest.mark.kapi
def test_the_real_trainer_fills_trainerstatus_and_trainctl_reads_it(
    cluster: Cluster, kubeconfig: Path, tmp_path: Path, digits_data: Path
) -> None:
    namespace = f"progress-{os.getpid() % 10000}"
    cluster.core.create_namespace({"metadata": {"name": namespace}})
    trainjob = _trainjob("digits-progress", namespace)
    cluster.custom.create_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", trainjob, field_validation="Strict"
    )
    cert, key = self_signed(tmp_path, f"{SERVICE}.{OPERATOR_NS}.svc")
    server = StatusServer(cluster.custom, cert, key)
    try:
        token = tmp_path / "token"
        token.write_text(server.issue_token(namespace, "digits-progress"))
        env = {e["name"]: e["value"] for e in env_vars(trainjob, SERVICE, OPERATOR_NS, server.port)}
        url = urlsplit(env[ENV_URL])
        env.update(
            {
                ENV_URL: url._replace(netloc=f"127.0.0.1:{server.port}").geturl(),
                ENV_CA: str(cert),
                ENV_TOKEN: str(token),
            }
        )
        # a token for another TrainJob is refused, as auth.go's audience check refuses it
        other = tmp_path / "other-token"
        other.write_text(server.issue_token(namespace, "someone-else"))
        denied = kubeflow_status.KubeflowStatus(env[ENV_URL], str(cert), str(other), 0)
        denied.post(
            json.dumps({"trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": "2026-11-24T00:00:00Z"}}).encode()
        )
        assert denied.failed and not server.applied

        argv = [
            sys.executable, "-m", "trainer.train", "--model", "digits", "--train-data", str(digits_data / "train.jsonl"),
            "--epochs", "10", "--batch-size", "32", "--log-every", "50", "--checkpoint-every", "10000",
            "--output-dir", str(tmp_path / "out"),
        ]  # fmt: skip
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINER_", "SLURM_", "KUBEFLOW_"))}
        trainer = subprocess.Popen(
            # 30 ms more per step: 450 steps last over 13 s on any machine, so the status server (one POST
            # at most every 5 s, trainer/training/kubeflow_status.py) sees at least 3 of them however fast digits trains
            argv,
            env={**clean, **env, "OMP_NUM_THREADS": "1", "TRAINER_FAILPOINTS": "compute=slow(30)"},
            stderr=subprocess.PIPE,
            text=True,
        )
        trainctl = Path(sys.executable).parent / "trainctl"
        seen: list[int] = []
        while trainer.poll() is None:
            shown = subprocess.run([str(trainctl), "status", f"kubernetes:{namespace}/digits-progress", "--output", "json"],
                                   capture_output=True, text=True, timeout=60)  # fmt: skip
            step = (json.loads(shown.stdout or "{}").get("progress") or {}).get("step")
            if step is not None and trainer.poll() is None:
                seen.append(step)
            time.sleep(0.5)
        stderr = trainer.stderr.read() if trainer.stderr else ""
        assert trainer.returncode == 0, stderr[-3000:]
        assert "not reported" not in stderr, stderr[-3000:]
    finally:
        server.close()
    # what the server applied, the real API server accepted against the v2.3.0 CRD; percentages only rise
    percents = [s["progressPercentage"] for s in server.applied]
    assert len(percents) >= 3 and percents == sorted(percents) and percents[-1] == 100, server.applied
    assert len(set(seen)) >= 2 and seen == sorted(seen), seen
    final = cluster.custom.get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", "digits-progress"
    )
    status = final["status"]["trainerStatus"]
    metrics = {m["name"]: m["value"] for m in status["metrics"]}
    assert status["progressPercentage"] == 100 and status["estimatedRemainingSeconds"] == 0, status
    assert metrics["step"] == metrics["total_steps"] and int(metrics["step"]) >= max(seen), status
    shown = subprocess.run(
        [str(trainctl), "status", f"kubernetes:{namespace}/digits-progress"], capture_output=True, text=True, timeout=60
    )
    total = f"{int(metrics['step']):,}"
    assert f"progress: step {total}/{total} (100 %) · epoch 9 · loss " in shown.stdout, shown.stdout + shown.stderr


@pytest.mark.parametrize(
    "fields",
    [
        {"step": 12, "total_steps": 40, "epoch": 0, "loss": 0.5, "samples_per_s": 100.0, "eta_s": 3.2},
        {"step": 40, "total_steps": 40, "epoch": 3, "loss": None, "samples_per_s": None, "eta_s": 0.0},
        {"step": 1, "total_steps": 10**9, "epoch": 0, "loss": 1e-12, "samples_per_s": 5e6, "eta_s": 1e12},
    ],
)
def test_the_trainers_request_is_the_trainer_apis_type(fields: dict[str, Any]) -> None:
    """Each body the trainer posts reads as Trainer v2.3.0's UpdateTrainJobStatusRequest (kubeflow-trainer-api,
    generated from its API) with nothing dropped, and stays inside the CRD's bounds (int32, 0-100, 1-64 chars)."""
    from datetime import datetime

    from kubeflow_trainer_api.models import TrainerV1alpha1UpdateTrainJobStatusRequest as Request

    body = kubeflow_status.trainer_status(fields)
    typed = Request.from_dict(body).model_dump(mode="json", by_alias=True, exclude_none=True)
    sent, read = body["trainerStatus"], typed["trainerStatus"]
    assert datetime.fromisoformat(read.pop("lastUpdatedTime")) == datetime.fromisoformat(sent.pop("lastUpdatedTime"))
    assert read == sent
    assert 0 <= sent["progressPercentage"] <= 100 and 0 <= sent["estimatedRemainingSeconds"] < 2**31
    assert all(1 <= len(m["name"]) <= 64 and 1 <= len(m["value"]) <= 64 for m in sent["metrics"])
