"""The digits job with its data in S3 (moto's server over HTTP) on the real local SLURM cluster, 2 nodes x 2
processes: one node's launcher stages each input into the shared data cache under its lock, the other waits and
reads the same copy (one GET per object in the server's request log); a second run downloads nothing; a missing
object exits 2 at submit; one this machine cannot check (a denied read on the nodes, here an object removed
after submit) ends the attempt `invalid input` with the URI in `trainctl status`."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from run_cli import trainctl  # tests/support
from s3_server import S3Server, s3_server  # tests/support

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
BUCKET = "digits-slurm"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, digits_data: Path) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:
        server.put_digits(digits_data, BUCKET)
        yield server


@pytest.fixture
def s3_job(tmp_path: Path, store: S3Server, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)  # sbatch passes the submitter's environment to the job (--export=ALL)
    job = yaml.safe_load((ROOT / "examples" / "digits.yaml").read_text())
    job["data"] = {"train": f"s3://{BUCKET}/digits/train.jsonl", "val": f"s3://{BUCKET}/digits/val.jsonl"}
    job["trainer"]["epochs"] = 2
    job["resources"] = {"nodes": 2, "procs_per_node": 2}
    job["slurm"] = {"python_env": sys.prefix, "workdir": str(tmp_path / "runs")}
    path = tmp_path / "digits-s3.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_two_nodes_train_from_one_staged_copy_and_a_second_run_downloads_nothing(
    cluster: object, s3_job: Path, store: S3Server, home: Path, tmp_path: Path
) -> None:
    store.reset_log()
    first = trainctl("submit", str(s3_job), "--target", "slurm", "--wait")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    # two nodes, one download of each object: the other node waited for the copy under the lock
    assert store.gets(f"/{BUCKET}/digits/train.jsonl") == 1 and store.gets(f"/{BUCKET}/digits/val.jsonl") == 1
    workdir = tmp_path / "runs"
    cache = workdir / "data-cache"
    log = next(workdir.glob("digits-*.out")).read_text()
    assert log.count(f"data s3://{BUCKET}/digits/train.jsonl -> {cache}/") == 2, log  # both nodes read that copy
    assert log.count("(fetched 1 object(s)") == 2 and log.count("the cached copy verified") == 2, log
    entries = [p for p in cache.iterdir() if p.is_dir()]
    assert len(entries) == 2 and not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]
    run_dir = next(p for p in (workdir / "runs").iterdir() if p.is_dir())
    summary = json.loads((run_dir / "output" / "summary.json").read_text())
    assert summary["world_size"] == 4 and summary["val_accuracy"] > 0.5

    store.reset_log()
    second = trainctl("submit", str(s3_job), "--target", "slurm", "--wait")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert store.gets("/digits/") == 0, store.requests()
    assert "testing-secret" not in "".join(p.read_text() for p in workdir.glob("digits-*.out"))


def test_a_missing_object_exits_2_at_submit_naming_the_uri(cluster: object, s3_job: Path, home: Path) -> None:
    job = yaml.safe_load(s3_job.read_text())
    job["data"]["val"] = f"s3://{BUCKET}/digits/nope.jsonl"
    s3_job.write_text(yaml.safe_dump(job))
    done = trainctl("submit", str(s3_job), "--target", "slurm")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"data.val: s3://{BUCKET}/digits/nope.jsonl: no such object" in done.stderr


@pytest.mark.parametrize("retries", [0, 1])
def test_bad_input_on_the_nodes_fails_the_attempt_invalid_input_naming_the_uri(
    cluster: object, s3_job: Path, home: Path, tmp_path: Path, retries: int
) -> None:
    """What submit cannot see: the nodes read another store than this machine (the job's env names its endpoint:
    an empty moto server), where the bucket does not exist. The launcher exits 2 and leaves failure.json, so
    `trainctl status` names the URI (srun's 143 for the node it stopped is no preemption); with `retries`, the
    attempt is recorded with cause invalid and not retried."""
    with s3_server(tmp_path) as other:
        job = yaml.safe_load(s3_job.read_text())
        job["env"] = {"AWS_ENDPOINT_URL": other.endpoint}
        job["retries"] = retries
        s3_job.write_text(yaml.safe_dump(job))
        done = trainctl("submit", str(s3_job), "--target", "slurm", "--wait")
    assert done.returncode != 0, done.stdout + done.stderr
    run_id = done.stderr.split("submitted ", 1)[1].split()[0]
    status = json.loads(trainctl("status", run_id, "--output", "json").stdout)
    said = f"s3://{BUCKET}/digits/train.jsonl: no such bucket; check the bucket's name (and AWS_ENDPOINT_URL)"
    assert status["reason"].startswith("the launcher on n") and status["reason"].endswith(f"(exit 2): {said}"), status
    if retries:
        assert [a["cause"] for a in status["attempts"]] == ["invalid"], status  # invalid input is never retried
