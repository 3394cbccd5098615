"""`trainctl pull` / `Run.pull()` of a Kubernetes run (issue 37 §2), without pods/exec: a reader pod owned by the
run's object mounts its PVC read-only and prints the output folder to its log as framed base64 with sha256s;
trainctl reads the log through the API server (pods/log), checks the digests, writes the files, deletes the pod.

Against the real test API server (kapi): the Trainer port runs the digits TrainJob and the test kubelet
(pod_runner.py) runs the pods, the reader pod among them; the pulled model loads with docs/trainer.md's lines.
The kubelet's log budget (pod_runner.py _LOG_LIMIT, 200,000 characters) stands in for a real kubelet's
containerLogMaxSize, so the tests set the byte limit below it. Error paths: a missing folder, a model over the
limit, a pod that never starts or cannot pull its image, a file whose digest does not match; each leaves no pod behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from digits import example_digits  # tests/support
from final_model_doc import load_and_score
from k8s_testlib import REPO, Operators, helper_pods_run
from port_pss import violations
from trainctl import Job, Run, RunState
from trainctl.errors import EngineError
from trainctl.runs.log_frames import log_files
from trainctl.runs.record import Provenance
from trainctl.runs.state import Paths, RunRef
from trainctl.targets.kubernetes import engine as k8s
from trainctl.targets.kubernetes import output_pull, output_reader
from trainctl.targets.kubernetes.handle import KubernetesHandle

MOUNT, CLAIM = "/mnt/trainctl", "trainctl-checkpoints"
BUDGET = 140_000  # bytes of files whose base64 fits the test kubelet's 200,000-character log


@pytest.fixture
def readers(operators: Operators, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """The test kubelet for reader pods; the log limit set to what its log budget holds."""
    monkeypatch.setattr(output_reader, "LOG_LIMIT", BUDGET)
    with helper_pods_run(operators, output_reader.LABEL) as ran:
        yield ran


def _leftovers(operators: Operators) -> list[str]:
    pods = operators.cluster.core.list_namespaced_pod(operators.ns, label_selector=output_reader.LABEL).items
    return [p.metadata.name for p in pods]


def _ref(operators: Operators, folder: str) -> RunRef:
    """A run recorded as one whose object is gone and whose output folder is `folder` under the claim."""
    handle = KubernetesHandle(kubeconfig=str(operators.cluster.kubeconfig), api="trainjob", pvc=CLAIM,
                              pvc_mount_path=MOUNT)  # fmt: skip
    provenance = Provenance(image="ghcr.io/trainctl/trainer:0.1.0", spec_sha256="0" * 64, trainctl_version="0")
    return RunRef(target="kubernetes", native_id=f"{operators.ns}/gone-0a1b", job_name="gone",
                  paths=Paths(output_dir=f"{MOUNT}/{folder}"), provenance=provenance, handle=handle)  # fmt: skip


def _model_folder(operators: Operators, folder: str, weights: bytes) -> Path:
    """A finished run's output on the claim, as final_model.py writes it."""
    out = operators.claim() / folder
    out.mkdir(parents=True)
    (out / "model.safetensors").write_bytes(weights)
    meta = {"model": "digits", "file": "model.safetensors", "sha256": hashlib.sha256(weights).hexdigest()}
    (out / "model.json").write_text(json.dumps(meta))
    (out / "summary.json").write_text('{"steps": 3}')
    return out


@pytest.mark.kapi
@pytest.mark.slow
def test_a_finished_trainjobs_model_is_pulled_and_loads_with_the_documented_lines(
    operators: Operators, readers: list[dict[str, Any]], tmp_path: Path
) -> None:
    data = example_digits()
    shutil.copytree(data, operators.claim() / "data" / "digits", dirs_exist_ok=True)
    job = Job.from_yaml(REPO / "examples" / "digits.yaml").with_overrides(
        [
            "name=pull",
            f"kubernetes.namespace={operators.ns}",
            "kubernetes.api=trainjob",
            "resources.nodes=1",
            "resources.procs_per_node=1",
            "trainer.model_args.channels=8",  # a smaller ConvNet: its weights fit the test kubelet's log budget
            "trainer.model_args.hidden=32",
        ]
    )
    ref = k8s.submit(job, kubeconfig=str(operators.cluster.kubeconfig))
    operators.run("trainjob", ref.native_id.partition("/")[2], timeout=400)
    assert k8s.status(ref).state is RunState.SUCCEEDED, list(k8s.logs(ref))[-40:]
    on_claim = operators.claim() / str(ref.paths.output_dir).removeprefix(MOUNT + "/")

    pulled = Run.of(ref).pull(tmp_path / "here" / "output")

    assert {"model.json", "model.safetensors", "summary.json"} <= {p.name for p in pulled.iterdir()}
    for path in pulled.iterdir():
        assert path.read_bytes() == (on_claim / path.name).read_bytes(), path.name
    (pod,) = readers
    obj = operators.cluster.custom.get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", operators.ns, "trainjobs", ref.native_id.partition("/")[2]
    )
    assert [o["uid"] for o in pod["metadata"]["ownerReferences"]] == [obj["metadata"]["uid"]]
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": CLAIM, "readOnly": True}
    assert pod["spec"]["containers"][0]["image"] == job.image
    assert violations(pod["spec"]) == []  # Pod Security "restricted", as the trainer's own pods
    assert _leftovers(operators) == []
    summary = json.loads((pulled / "summary.json").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINER_", "TRAINCTL_"))}
    env |= {"PYTHONPATH": str(REPO / "trainer_image"), "OMP_NUM_THREADS": "1"}
    accuracy = load_and_score(pulled, data / "val.jsonl", sys.executable, env)
    assert accuracy == pytest.approx(summary["val_accuracy"], abs=1e-6), (accuracy, summary)


@pytest.mark.kapi
def test_a_missing_output_folder_names_the_run_and_the_pvc_path(
    operators: Operators, readers: list[dict[str, Any]], tmp_path: Path
) -> None:
    ref = _ref(operators, "gone/gone-0a1b-uid/output")
    with pytest.raises(EngineError) as raised:
        Run.of(ref).pull(tmp_path / "pulled")
    said = str(raised.value)
    assert ref.id in said and f"pvc://{CLAIM}/gone/gone-0a1b-uid/output" in said and "no folder" in said, said
    assert "ended Failed" in said and len(readers) == 1 and _leftovers(operators) == []
    assert not (tmp_path / "pulled").exists()


@pytest.mark.kapi
def test_a_model_over_the_limit_says_what_to_do_and_small_files_still_come(
    operators: Operators, readers: list[dict[str, Any]], tmp_path: Path
) -> None:
    out = _model_folder(operators, "big/output", os.urandom(BUDGET + 1))
    with pytest.raises(EngineError) as raised:
        output_pull.fetch_output(_ref(operators, "big/output"), tmp_path / "pulled")
    said = str(raised.value)
    assert "too large" in said and "model.safetensors 0.1 MiB" in said and "s3://" in said, said
    assert f"kubectl -n {operators.ns} cp" in said and _leftovers(operators) == []
    assert not (tmp_path / "pulled").exists()

    (out / "model.safetensors").unlink()  # model.json names weights that are not there
    with pytest.raises(EngineError, match=r"model.json names model.safetensors, which is not in pvc://"):
        output_pull.fetch_output(_ref(operators, "big/output"), tmp_path / "pulled")
    assert _leftovers(operators) == []


@pytest.mark.kapi
def test_a_reader_pod_that_never_starts_is_deleted(operators: Operators, tmp_path: Path) -> None:
    """No kubelet runs it (an image that cannot be pulled, a claim that cannot be mounted): it stays Pending."""
    _model_folder(operators, "stuck/output", b"weights")
    with pytest.raises(EngineError, match=r"the reader pod .*-pull-[0-9a-f]{4} is still Pending after 2s"):
        output_pull.fetch_output(_ref(operators, "stuck/output"), tmp_path / "pulled", timeout=2)
    assert _leftovers(operators) == []


@pytest.mark.kapi
def test_a_reader_pod_whose_image_cannot_be_pulled_is_given_up_at_once(operators: Operators, tmp_path: Path) -> None:
    """A kubelet that cannot pull the image reports `ImagePullBackOff` (its waiting reason) and tries on and on:
    the pull says so at once, naming the image's message, and deletes the pod."""
    _model_folder(operators, "nopull/output", b"weights")
    core, ns = operators.cluster.core, operators.ns
    message = 'Back-off pulling image "ghcr.io/trainctl/trainer:0.1.0"'
    waiting = {"reason": "ImagePullBackOff", "message": message}

    def kubelet() -> None:
        for _ in range(100):
            for pod in core.list_namespaced_pod(ns, label_selector=output_reader.LABEL).items:
                status = {"phase": "Pending", "containerStatuses": [{"name": "read", "image": pod.spec.containers[0].image,
                          "imageID": "", "ready": False, "restartCount": 0, "state": {"waiting": waiting}}]}  # fmt: skip
                core.patch_namespaced_pod(pod.metadata.name, ns, {"status": status})
                return
            time.sleep(0.1)

    thread = threading.Thread(target=kubelet, daemon=True)
    thread.start()
    started = time.monotonic()
    with pytest.raises(EngineError, match=r"the reader pod .*-pull-[0-9a-f]{4} cannot start: read: ImagePullBackOff"):
        output_pull.fetch_output(_ref(operators, "nopull/output"), tmp_path / "pulled", timeout=60)
    thread.join(timeout=10)
    assert time.monotonic() - started < 30 and _leftovers(operators) == []


def test_an_output_folder_off_the_pvc_is_named_before_any_pod() -> None:
    """No kubernetes.pvc (the pods' emptyDir, gone with them), or an output_dir under no mount of that claim."""
    base = RunRef(target="kubernetes", native_id="ns/r-0a1b", paths=Paths(output_dir="/workspace/output"))
    with pytest.raises(
        EngineError, match=r"kubernetes:ns/r-0a1b: its output folder /workspace/output was on its pods' emptyDir"
    ):
        output_pull.where_of(base)
    elsewhere = base.model_copy(update={"handle": KubernetesHandle(pvc=CLAIM, pvc_mount_path=MOUNT),
                                        "paths": Paths(output_dir="/mnt/trainctl-other/out")})  # fmt: skip
    with pytest.raises(EngineError, match=rf"/mnt/trainctl-other/out is not on its PVC {CLAIM} \(mounted at {MOUNT}\)"):
        output_pull.where_of(elsewhere)
    found = output_pull.where_of(elsewhere.model_copy(update={"paths": Paths(output_dir=f"{MOUNT}/j/r/output")}))
    assert str(found) == f"pvc://{CLAIM}/j/r/output ({MOUNT}/j/r/output in its pods)"


def test_the_pods_framing_comes_back_whole_and_a_changed_byte_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """trainer/output_log.py's lines, joined by runs/log_frames.py, checked by output_reader.verified."""
    from trainer import output_log

    out = tmp_path / "output"
    out.mkdir()
    weights = os.urandom(120_000)  # three 48 KiB lines of base64 and more
    meta = {"file": "model.safetensors", "sha256": hashlib.sha256(weights).hexdigest()}
    files = {"model.json": json.dumps(meta).encode(), "model.safetensors": weights, "metrics.jsonl": b"{}\n" * 30000}
    for name, data in files.items():
        (out / name).write_bytes(data)
    assert output_log.main([str(out), "200000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    where = output_reader.Where(CLAIM, MOUNT, f"{MOUNT}/r/output")

    got, notes = output_reader.verified("kubernetes:ns/r", where, log_files(lines, output_reader.MARK), "hint")
    assert got == {k: files[k] for k in ("model.json", "model.safetensors")}
    assert notes == ["metrics.jsonl (90,000 bytes) left on the PVC: past the 200,000-byte limit"]

    index = next(i for i, line in enumerate(lines) if " model.safetensors 2/" in line)
    chunk = lines[index].rsplit(" ", 1)
    lines[index] = f"{chunk[0]} {'A' * 4}{chunk[1][4:]}"
    with pytest.raises(ValueError, match=r"model\.safetensors does not match the sha256 the reader pod computed"):
        output_reader.verified("kubernetes:ns/r", where, log_files(lines, output_reader.MARK), "hint")
    with pytest.raises(ValueError, match="ended before its manifest"):
        output_reader.verified("kubernetes:ns/r", where, log_files(lines[:-1], output_reader.MARK), "hint")
