"""Issue 37 section 1 on Kubernetes: rank 1 of a 2-process gloo pod raises; the pod's launcher puts the first
failing rank's record (rank, node, exception, message, last lines) in its container's termination message, the
test kubelet turns it into `state.terminated.message` as kubelet does, and `status` reads it from outside the
cluster, with no access to the PVC's failure.json."""

from __future__ import annotations

import time
from typing import Any

import pytest
from k8s_testlib import REPO, Operators
from port_scheduler import fake_node
from trainctl import Job, RunState
from trainctl.run import Run
from trainctl.runs.causes import Cause
from trainctl.targets.kubernetes import engine as k8s
from trainctl.targets.kubernetes.driven import stop_driver

pytestmark = [pytest.mark.kapi, pytest.mark.slow]


@pytest.mark.parametrize("api", ["trainjob"])  # the default; a PyTorchJob's pods pass the message the same way
def test_rank_1_raising_is_named_in_status(operators: Operators, api: str) -> None:
    operators.runner.nodes = [fake_node("n7")]  # the scheduler port places the pod there: its spec.nodeName
    job = Job.parse({
        "name": f"boom-{api}", "command": ["python", "boom_rank1.py"], "code": str(REPO / "tests/programs/boom"),
        "resources": {"procs_per_node": 2}, "retries": 0,
        "kubernetes": {"namespace": operators.ns, "api": api, "pvc": "trainctl-checkpoints"},
    })  # fmt: skip
    run = k8s.submit(job, kubeconfig=str(operators.cluster.kubeconfig))
    operators.run(run.handle.api, run.native_id.partition("/")[2], timeout=300)
    st = Run.of(run).status()
    logs: list[Any] = list(k8s.logs(run))
    assert st.state is RunState.FAILED and st.failure is not None, (st, logs[-30:])
    node = operators.runner.nodes[0]["metadata"]["name"]
    assert st.reason == f"rank 1 on {node} failed (exit 1): RuntimeError: boom on rank 1 at epoch 2", (st, logs[-30:])
    assert (st.failure.rank, st.failure.node, st.failure.exception) == (1, node, "RuntimeError")
    assert st.log_tail[-1] == "RuntimeError: boom on rank 1 at epoch 2" and "epoch 2 on rank 1" in st.log_tail


def test_an_image_without_the_trainer_is_named_and_never_retried(operators: Operators) -> None:
    """The image has no `trainer-launch` on its PATH (here: the job's PATH leaves the project's venv out): containerd
    reports the container exited with StartError, exit 128 and runc's words (the test kubelet, pod_start.py).
    The runtime's podFailurePolicy fails the Job at once, trainctl's driver calls the attempt invalid and never
    retries it, however many `retries`, and status names the program and the fix, not `exit code 128`."""
    operators.runner.nodes = [fake_node("n7")]
    job = Job.parse({
        "name": "no-trainer", "command": ["python", "-c", "print('never')"], "retries": 2, "env": {"PATH": "/usr/bin:/bin"},
        "kubernetes": {"namespace": operators.ns, "api": "trainjob"},
    })  # fmt: skip
    with pytest.warns(UserWarning, match=r"this machine drives its retries"):
        run = job.submit("kubernetes", kubeconfig=str(operators.cluster.kubeconfig))
    try:
        name = run.native_id.partition("/")[2]
        final, _ = operators.run("trainjob", name, timeout=120)
        assert final["status"]["conditions"][-1]["reason"] == "FailJobSetFailurePolicyAction", final["status"]
        deadline = time.monotonic() + 60
        while not (st := Run.of(run).status()).state.finished:
            assert time.monotonic() < deadline, st
            time.sleep(0.5)
    finally:
        stop_driver(run)
    (attempt,) = st.attempts
    assert (st.state, attempt.cause, attempt.exit_code) == (RunState.FAILED, Cause.INVALID, 128), st
    assert st.reason.startswith('the container could not start on n7 (exit 128): exec: "trainer-launch": executable '
                                "file not found in $PATH: the image "), st.reason  # fmt: skip
    assert "build it FROM the trainer image" in st.reason, st.reason
    assert st.failure is not None and "failed to create containerd task" in (st.failure.log_tail or [""])[0]
    assert not any(rp.name.startswith(f"{name}-a2") for rp in operators.runner.started.values())
