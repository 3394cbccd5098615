"""`s3://` data inputs on Kubernetes: each pod's launcher stages them into the launchers' cache on the run's PVC
(`<pvc mount>/.trainctl-data-cache`), one pod under the cache's lock while the others wait, as SLURM nodes do on
their shared filesystem; TrainJob and PyTorchJob alike. The render tests are pure; the end-to-end test runs the
digits job on a 2-node TrainJob on the real API server (the ported operators, the test kubelet's process pods)
with its data in moto's S3 server over HTTP on 127.0.0.1, and counts GETs in the server's request log."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from s3_server import S3Server, s3_server  # tests/support
from test_shapes_e2e import digits
from trainctl import Job, RunState
from trainctl.run import Run
from trainctl.runs.causes import Cause, retried
from trainctl.targets.kubernetes import causes
from trainctl.targets.kubernetes import engine as k8s
from trainctl.targets.lookup import get_target

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "digits-k8s"
S3_DATA = {"data.train": f"s3://{BUCKET}/digits/train.jsonl", "data.val": f"s3://{BUCKET}/digits/val.jsonl"}
CACHE = "/mnt/trainctl/.trainctl-data-cache"
__all__ = ["digits"]  # the fixture, shared with the shapes test


def _job(*sets: str, **more: str) -> Job:
    job = Job.from_yaml(ROOT / "examples" / "digits.yaml")
    return job.with_overrides([*(f"{k}={v}" for k, v in {**S3_DATA, **more}.items()), *sets])


def _container(manifest: dict[str, Any]) -> dict[str, Any]:
    if manifest["kind"] == "TrainJob":
        return dict(manifest["spec"]["trainer"])
    spec = next(iter(manifest["spec"]["pytorchReplicaSpecs"].values()))
    return dict(spec["template"]["spec"]["containers"][0])


@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_s3_inputs_render_the_launchers_data_cache_on_the_pvc(api: str) -> None:
    rendered = get_target("kubernetes").render(_job(**{"kubernetes.api": api, "kubernetes.pvc": "trainctl-data"}))
    c = _container(rendered.native)
    command = [*c.get("command", []), *c.get("args", [])]
    at = command.index("--data-cache")
    assert command[at + 1] == CACHE and command.count("--data-cache") == 1
    assert S3_DATA["data.train"] in command  # the launcher replaces the URI with its staged copy's path
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["TRAINER_DATA_TRAIN"] == S3_DATA["data.train"] and env["TRAINER_DATA_VAL"] == S3_DATA["data.val"]
    said = [n for n in rendered.notes if n.startswith("data.")]
    assert len(said) == 2 and all(f"into {CACHE}/<identity>/" in n and "'trainctl-data'" in n for n in said), said


def test_without_a_pvc_the_cache_is_the_pods_emptydir_and_render_says_so() -> None:
    rendered = get_target("kubernetes").render(_job("kubernetes.pvc=null"))
    command = rendered.native["spec"]["trainer"]["command"]
    assert command[command.index("--data-cache") + 1] == "/workspace/.trainctl-data-cache"
    assert any("emptyDir" in n and "every pod downloads its own copy" in n for n in rendered.notes), rendered.notes


def test_local_data_renders_no_data_cache() -> None:
    rendered = get_target("kubernetes").render(Job.from_yaml(ROOT / "examples" / "digits.yaml"))
    assert "--data-cache" not in rendered.text and ".trainctl-data-cache" not in rendered.text


def test_nothing_secret_in_the_render_and_the_endpoint_passes_through() -> None:
    job = _job(
        "env.AWS_ENDPOINT_URL=http://127.0.0.1:9000",
        'secrets=[{"name": "s3-keys", "env": "AWS_SECRET_ACCESS_KEY", "key": "secret"}]',
    )
    rendered = get_target("kubernetes").render(job)
    env = {e["name"]: e for e in rendered.native["spec"]["trainer"]["env"]}
    assert env["AWS_ENDPOINT_URL"]["value"] == "http://127.0.0.1:9000"
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "s3-keys", "key": "secret"}}


@pytest.fixture
def store(tmp_path: Path, digits: Path) -> Iterator[S3Server]:
    (tmp_path / "moto").mkdir()
    with s3_server(tmp_path / "moto", buckets=(BUCKET,)) as server:
        s3: Any = server.client()
        for name in ("train", "val"):
            s3.upload_file(str(digits / f"{name}.jsonl"), BUCKET, f"digits/{name}.jsonl")
        yield server


def _submit(ops: Any, job: Job) -> Any:
    run = k8s.submit(job, kubeconfig=str(ops.cluster.kubeconfig))
    ops.run(run.handle.api, str(run.native_id.partition("/")[2]), timeout=400)
    return run


def test_a_missing_object_is_a_problem_at_submit_naming_the_uri(
    store: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only what is certain from this machine: the pods may hold other credentials, a missing object is missing."""
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)
    target = get_target("kubernetes")
    job = _job(**{"data.val": f"s3://{BUCKET}/digits/nope.jsonl"})
    found = target.check_inputs(job, target.options())
    assert found == [f"data.val: s3://{BUCKET}/digits/nope.jsonl: no such object, and no objects under it; "
                     "check the key (a prefix ends with /)"], found  # fmt: skip
    assert target.check_inputs(_job(), target.options()) == []


@pytest.mark.kapi
@pytest.mark.slow
@pytest.mark.parametrize("api", ["trainjob", "pytorchjob"])
def test_two_nodes_train_from_s3_and_a_second_run_downloads_nothing(operators: Any, store: S3Server, api: str) -> None:
    """The pods' credentials are their service account's (IRSA: the test kubelet gives trainctl-trainer's pods
    the keys, as EKS's webhook injects a web identity); the job's env names the store's endpoint."""
    keys = {k: v for k, v in store.env().items() if k != "AWS_ENDPOINT_URL"}
    operators.runner.credentials["trainctl-trainer"] = keys
    job = _job(
        "name=s3tj", f"kubernetes.namespace={operators.ns}", f"kubernetes.api={api}", "resources.nodes=2",
        "resources.procs_per_node=1", f"env.AWS_ENDPOINT_URL={store.endpoint}",
        "kubernetes.service_account=trainctl-trainer",  # the account IRSA annotates (a PyTorchJob names none)
    )  # fmt: skip
    store.reset_log()
    run = _submit(operators, job)
    st = k8s.status(run)
    assert st.state is RunState.SUCCEEDED, (st, list(k8s.logs(run))[-40:])
    folder = operators.claim() / "s3tj" / f"{run.native_id.partition('/')[2]}-{run.run_uid}"
    summary = json.loads((folder / "output" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["val_accuracy"] > 0.9, summary
    # two pods, one download of each object: the other pod waited for the copy under the cache's lock
    assert store.gets(f"/{BUCKET}/digits/train.jsonl") == 1 and store.gets(f"/{BUCKET}/digits/val.jsonl") == 1
    cache = operators.claim() / ".trainctl-data-cache"
    entries = [p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(entries) == 2 and not [p for p in cache.iterdir() if p.name.startswith(".tmp-")], list(cache.iterdir())
    assert sorted(f.name for e in entries for f in e.rglob("*.jsonl")) == ["train.jsonl", "val.jsonl"]
    logs = "\n".join(k8s.logs(run))
    assert logs.count(f"data {S3_DATA['data.train']} -> /mnt/trainctl/.trainctl-data-cache/") == 2, logs[-3000:]
    assert "testing-secret" not in logs

    store.reset_log()
    again = _submit(operators, job)
    assert k8s.status(again).state is RunState.SUCCEEDED
    assert store.gets("/digits/") == 0, store.requests()


@pytest.mark.kapi
@pytest.mark.slow
def test_a_missing_bucket_in_the_pods_store_ends_the_attempt_invalid_naming_the_uri(
    operators: Any, store: S3Server, tmp_path: Path
) -> None:
    """What submit cannot see: the pods read another store (the job's env names an empty moto server). The
    launcher exits 2 and leaves its record as the termination message: the run fails naming the URI."""
    operators.runner.credentials["trainctl-trainer"] = {k: v for k, v in store.env().items() if k != "AWS_ENDPOINT_URL"}
    (tmp_path / "other").mkdir()
    with s3_server(tmp_path / "other") as other:
        job = _job(
            "name=s3bad", f"kubernetes.namespace={operators.ns}", "resources.nodes=2", "resources.procs_per_node=1",
            f"env.AWS_ENDPOINT_URL={other.endpoint}",
        )  # fmt: skip
        run = _submit(operators, job)
    st = Run.of(run).status()
    said = f"s3://{BUCKET}/digits/train.jsonl: no such bucket; check the bucket's name (and AWS_ENDPOINT_URL)"
    assert st.state is RunState.FAILED and (st.reason or "").endswith(f"(exit 2): {said}"), st
    # the attempt's cause, as the retry decision reads it: invalid input, never retried
    name = str(run.native_id.partition("/")[2])
    record = json.loads((operators.claim() / "s3bad" / f"{name}-{run.run_uid}" / "output" / "failure.json").read_text())
    pods = [rp.extra["api"] for rp in operators.runner.started.values()]
    attempt = causes.attempt_of(1, name, pods, record)
    assert attempt.cause is Cause.INVALID and not retried(attempt.cause, job.retry_on, 1, 3), (attempt, record)


@pytest.mark.kapi
@pytest.mark.slow
def test_two_pods_stream_the_digits_each_rank_reading_about_1_over_n(operators: Any, store: S3Server) -> None:
    """`data.train: {uri: s3://..., mode: stream}` on a 2-node TrainJob, as on 2 SLURM nodes
    (tests/slurm/test_s3_stream_slurm.py): each pod's launcher checks the input and stages nothing of it, each rank
    reads about 1/N of the object per pass with ranged GETs (the store's log: each GET's Range, the rank in its
    User-Agent), data.val is staged on the claim as before, and the run trains. The same run's output and
    checkpoints go to S3 from the pod (`output_dir: s3://`, `checkpoint.dir: s3://`), as from local and SLURM."""
    operators.runner.credentials["trainctl-trainer"] = {k: v for k, v in store.env().items() if k != "AWS_ENDPOINT_URL"}
    size = int(store.client().head_object(Bucket=BUCKET, Key="digits/train.jsonl")["ContentLength"])  # type: ignore[attr-defined]
    job = _job(
        "name=s3st", f"kubernetes.namespace={operators.ns}", "resources.nodes=2", "resources.procs_per_node=1",
        f"env.AWS_ENDPOINT_URL={store.endpoint}", "kubernetes.service_account=trainctl-trainer",
        "trainer.streaming=true", "trainer.epochs=1", f"output_dir=s3://{BUCKET}/out",
        f"checkpoint.dir=s3://{BUCKET}/ck", "checkpoint.every_steps=10",
        **{"data.train": json.dumps({"uri": S3_DATA["data.train"], "mode": "stream"})},
    )  # fmt: skip
    store.reset_log()
    run = _submit(operators, job)
    st = k8s.status(run)
    logs = "\n".join(k8s.logs(run))
    assert st.state is RunState.SUCCEEDED, (st, logs[-3000:])
    folder = operators.claim() / "s3st" / f"{run.native_id.partition('/')[2]}-{run.run_uid}"
    summary = json.loads((folder / "output" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["val_accuracy"] > 0.5, summary
    # each pod's launcher checked the input and copied nothing of it; data.val is on the claim
    said = f"data {S3_DATA['data.train']} is streamed by each rank (1 object(s), {size} bytes; no copy)"
    assert logs.count(said) == 2, logs[-3000:]
    cache = operators.claim() / ".trainctl-data-cache"
    staged = sorted(f.name for f in cache.rglob("*.jsonl"))
    assert staged == ["val.jsonl"], staged
    # two passes over each rank's share (the count that sizes the epoch, the epoch), each ~1/N of the object
    store.assert_each_rank_read_its_share("/digits/train.jsonl", size, ranks=2, passes=2)
    # node 0's launcher uploaded the output folder, `_complete` last; rank 0 mirrored each checkpoint
    s3: Any = store.client()
    keys = {i["Key"] for i in s3.list_objects_v2(Bucket=BUCKET, Prefix="out/")["Contents"]}
    assert {f"out/{run.run_uid}/{n}" for n in ("_complete", "model.safetensors", "summary.json")} <= keys, keys
    ckpts = {i["Key"] for i in s3.list_objects_v2(Bucket=BUCKET, Prefix="ck/")["Contents"]}
    assert any(k.endswith("/_complete") for k in ckpts) and any(k.endswith("/meta.json") for k in ckpts), ckpts
