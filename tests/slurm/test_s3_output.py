"""`output_dir: s3://...` on the real local SLURM cluster, 2 nodes x 2 processes (issue 35 §4): node 0's launcher
uploads the output folder to `<prefix>/<run uid>/` (moto's server over HTTP) after the attempt, the other node
does not; `trainctl status` names where; `trainctl pull` brings the model back from S3, verified. With
`checkpoint.dir: s3://...` each published checkpoint is in S3 too, and runs continue from them: a new
submission of the job (its own folder empty) fetches the newest into its folder on the shared filesystem,
where the other node's ranks read it; a job whose checkpoints stay in its folder continues from the prefix
with `--resume-from s3://...` (submitted held, the checkpoint placed, released)."""

from __future__ import annotations

import hashlib
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
BUCKET = "digits-slurm-out"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto"), buckets=(BUCKET,)) as server:
        yield server


def test_node_0_uploads_the_output_and_pull_brings_it_back(
    cluster: object, store: S3Server, digits_data: Path, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in store.env().items():
        monkeypatch.setenv(key, value)  # sbatch passes the submitter's environment to the job (--export=ALL)
    job = yaml.safe_load((ROOT / "examples" / "digits.yaml").read_text())
    job["data"] = {"train": str(digits_data / "train.jsonl"), "val": str(digits_data / "val.jsonl")}
    job["trainer"]["epochs"] = 1
    job["resources"] = {"nodes": 2, "procs_per_node": 2}
    job["slurm"] = {"python_env": sys.prefix, "workdir": str(tmp_path / "runs")}
    job["output_dir"] = f"s3://{BUCKET}/slurm/"
    job["checkpoint"] = {"dir": f"s3://{BUCKET}/ckpt", "every_steps": 10, "keep": 2}
    path = tmp_path / "digits.yaml"
    path.write_text(yaml.safe_dump(job))
    done = trainctl("submit", str(path), "--target", "slurm", "--wait")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = next((tmp_path / "runs").glob("digits-*.out")).read_text()
    assert log.count(f"-> s3://{BUCKET}/slurm/") == 1, log[-4000:]  # node 0 only
    listed = store.client().list_objects_v2(Bucket=BUCKET)["Contents"]  # type: ignore[attr-defined]
    keys = {item["Key"] for item in listed if item["Key"].startswith("slurm/")}
    # checkpoint.dir: s3://...: rank 0 mirrored each published checkpoint, `_complete` last
    ckpts = {item["Key"].split("/")[1] for item in listed if item["Key"].startswith("ckpt/step-")}
    assert ckpts and all(f"ckpt/{c}/_complete" in {i["Key"] for i in listed} for c in ckpts), ckpts
    uid = next(k.split("/")[1] for k in keys if k.endswith("/_complete"))
    assert {f"slurm/{uid}/{n}" for n in ("_complete", "model.safetensors", "model.json", "summary.json")} <= keys
    run_id = next(line.split()[1] for line in (done.stdout + done.stderr).splitlines() if line.startswith("submitted "))
    status = trainctl("status", run_id)
    assert f"  output: s3://{BUCKET}/slurm/{uid}/" in status.stdout, status.stdout + status.stderr
    pulled = trainctl("pull", run_id, str(tmp_path / "pulled"))
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    meta = json.loads((tmp_path / "pulled" / "model.json").read_text())
    assert hashlib.sha256((tmp_path / "pulled" / meta["file"]).read_bytes()).hexdigest() == meta["sha256"]
    assert json.loads((tmp_path / "pulled" / "summary.json").read_text())["world_size"] == 4

    newest = max(ckpts)
    job["trainer"]["epochs"] = 2
    path.write_text(yaml.safe_dump(job))
    again = trainctl("submit", str(path), "--target", "slurm", "--wait", "--output", "json")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    log = Path(json.loads(again.stdout)["paths"]["log"]).read_text()
    step = int(newest.removeprefix("step-"))
    assert f"checkpoint s3://{BUCKET}/ckpt/{newest}/ fetched into " in log, log[-4000:]
    assert f"at step {step} " in log and "on n[1-2]" in log, log[-4000:]

    listed = store.client().list_objects_v2(Bucket=BUCKET, Prefix="ckpt/")["Contents"]  # type: ignore[attr-defined]
    newest = max(i["Key"].split("/")[1] for i in listed if i["Key"].endswith("/_complete"))  # the second run's
    job["checkpoint"], job["trainer"]["epochs"] = {"every_steps": 10}, 3
    job.pop("output_dir")
    path.write_text(yaml.safe_dump(job))
    moved = trainctl("submit", str(path), "--target", "slurm", "--resume-from", f"s3://{BUCKET}/ckpt", "--wait",
                     "--output", "json")  # fmt: skip
    assert moved.returncode == 0, moved.stdout[-3000:] + moved.stderr[-3000:]
    third = json.loads(moved.stdout)
    came = third["resumed_from"]
    assert (came["run"], came["target"], came["checkpoint"]) == (
        f"s3://{BUCKET}/ckpt",
        "s3",
        f"s3://{BUCKET}/ckpt/{newest}/",
    )
    assert came["copied_to"] == f"{third['paths']['checkpoint_dir']}/{newest}", came
    log = Path(third["paths"]["log"]).read_text()
    assert f"at step {came['step']} " in log and "on n[1-2]" in log, log[-4000:]
