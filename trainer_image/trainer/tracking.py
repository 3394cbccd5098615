"""The trainer's side of the job's one tracker run (docs/tracking.md): rank 0 joins the run trainctl fixed at
submit, counts itself as an attempt, logs the train and eval metrics with their steps, and ends it.

The ids arrive in the variables each tracker's own client reads (the SDK's spec/tracking.py), so a
`command:` job's `mlflow.start_run()` / `wandb.init()` joins the same run:
- MLflow, through its REST API (mlflow/server/handlers.py; api/2.0/mlflow/...) with the standard library, so
  the image needs no MLflow client: `MLFLOW_TRACKING_URI`, `MLFLOW_RUN_ID`, and `MLFLOW_TRACKING_TOKEN` (or
  `_USERNAME`/`_PASSWORD`) from `secrets:`. At the start the run is RUNNING again (an earlier attempt may
  have left it FAILED), `trainctl.attempts` counts this attempt and `trainctl.attempt.<n>` says where it ran
  and the step it resumed from; FINISHED at the end, FAILED when the loop raises. The launcher marks it FAILED
  when its workers fail (`mark_failed`: a rank that died before it could); a job killed outright is settled
  by the SDK's status refresh (trackers.settle).
- W&B (`WANDB_RUN_ID`, `WANDB_RESUME=allow`, `WANDB_PROJECT`, `WANDB_MODE`): `wandb.init(id=..., resume="allow")`,
  where wandb is installed (wandb_run.py).

After a resume from step N the metrics go on from N+1: the steps between the last checkpoint and the end
of the attempt that died are trained again, and logged again (their new values; at most one checkpoint
interval repeats, where the run went back). A tracker that cannot be reached never stops training: one
warning, then the run goes on without it.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from .log import log

TAG = "trainctl."
SKIPPED = ("time", "step", "epoch", "kind", "world_size")
ATTEMPT_IDS = ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", "TRAINING_JOB_NAME", "HOSTNAME")


class TrackerError(Exception):
    """The tracker refused a call or could not be reached."""


def _headers(env: Mapping[str, str]) -> dict[str, str]:
    token = env.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = env.get("MLFLOW_TRACKING_USERNAME"), env.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


class MlflowRun:
    """The job's MLflow run, through the REST API."""

    def __init__(self, uri: str, run_id: str, env: Mapping[str, str]) -> None:
        self.uri, self.run_id, self.headers = uri.rstrip("/"), run_id, _headers(env)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> MlflowRun | None:
        uri, run_id = env.get("MLFLOW_TRACKING_URI", ""), env.get("MLFLOW_RUN_ID", "")
        return cls(uri, run_id, env) if uri.startswith(("http://", "https://")) and run_id else None

    def call(self, endpoint: str, body: dict[str, Any] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode({'run_id': self.run_id})}" if body is None else ""
        request = urllib.request.Request(
            f"{self.uri}/api/2.0/mlflow/{endpoint}{query}",
            data=None if body is None else json.dumps({"run_id": self.run_id, **body}).encode(),
            headers={"Content-Type": "application/json", **self.headers},
        )
        try:
            with urllib.request.urlopen(request, timeout=20) as answer:
                return json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise TrackerError(f"MLflow {endpoint}: HTTP {exc.code} {exc.read()[:300]!r}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise TrackerError(f"MLflow at {self.uri}: {exc}") from None

    def set_status(self, status: str) -> None:
        ended = {} if status == "RUNNING" else {"end_time": int(time.time() * 1000)}
        self.call("runs/update", {"status": status, **ended})

    def start_attempt(self, resumed_from_step: int, env: Mapping[str, str]) -> int:
        """RUNNING, and this attempt counted in the run's tags; its number."""
        tags = {t["key"]: t["value"] for t in self.call("runs/get")["run"].get("data", {}).get("tags", [])}
        number = int(tags.get(f"{TAG}attempts", "0")) + 1
        where = {k.lower(): env[k] for k in ATTEMPT_IDS if env.get(k)}
        about = {"host": socket.gethostname(), **where, "resumed_from_step": resumed_from_step,
                 "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
        self.set_status("RUNNING")
        batch = {f"{TAG}attempts": str(number), f"{TAG}attempt.{number}": json.dumps(about, sort_keys=True)}
        self.call("runs/log-batch", {"tags": [{"key": k, "value": v} for k, v in batch.items()]})
        return number

    def log(self, record: dict[str, Any]) -> None:
        stamp, step = int(record.get("time", time.time()) * 1000), int(record.get("step", 0))
        metrics = [
            {"key": key, "value": float(value), "timestamp": stamp, "step": step}
            for key, value in record.items()
            if key not in SKIPPED and isinstance(value, int | float) and not isinstance(value, bool)
        ]
        if metrics:
            self.call("runs/log-batch", {"metrics": metrics})


class WandbRun:
    """The job's W&B run: `wandb.init(id=WANDB_RUN_ID, resume="allow")`, files under the output folder."""

    def __init__(self, run: Any) -> None:
        self.run = run

    @classmethod
    def from_env(cls, env: Mapping[str, str], output_dir: str) -> WandbRun | None:
        run_id = env.get("WANDB_RUN_ID")
        if not run_id or not env.get("WANDB_PROJECT"):
            return None
        import wandb  # only where a job asked for W&B; the image without it says so (TrackerError)

        kept = os.path.join(output_dir, "wandb-runs")  # one folder for every attempt (wandb writes wandb/ in it)
        os.makedirs(kept, exist_ok=True)
        return cls(wandb.init(id=run_id, resume="allow", dir=kept, project=env["WANDB_PROJECT"]))

    def log(self, record: dict[str, Any]) -> None:
        values = {k: v for k, v in record.items() if k not in SKIPPED and isinstance(v, int | float)}
        if values:
            self.run.log(values, step=int(record.get("step", 0)))

    def finish(self, ok: bool) -> None:
        self.run.finish(exit_code=0 if ok else 1)


class Trackers:
    """Rank 0's trackers (none elsewhere): `log` each metrics record; a context manager around the loop."""

    def __init__(
        self, rank: int, resumed_from_step: int, output_dir: str, env: Mapping[str, str] | None = None
    ) -> None:
        self.rank, self.mlflow, self.wandb = rank, None, None
        if rank != 0:
            return
        env = os.environ if env is None else env
        self.mlflow = MlflowRun.from_env(env)
        if self.mlflow is not None:
            self._try(
                lambda run: log(
                    rank, f"tracker: MLflow run {run.run_id}, attempt {run.start_attempt(resumed_from_step, env)}"
                )
            )
        try:
            self.wandb = WandbRun.from_env(env, output_dir)
        except ImportError:
            log(rank, "tracker: W&B was asked for, but wandb is not installed in this image: no W&B run")
        except Exception as exc:  # wandb's own errors (no key for online mode, no network): never stop training
            log(rank, f"tracker: W&B could not start ({type(exc).__name__}: {exc}); training goes on without W&B")

    def _try(self, action: Any) -> None:
        if self.mlflow is None:
            return
        try:
            action(self.mlflow)
        except TrackerError as exc:
            log(self.rank, f"tracker: {exc}; training goes on without MLflow")
            self.mlflow = None

    def log(self, record: dict[str, Any]) -> None:
        if record.get("kind", "train") not in ("train", "eval"):
            return
        self._try(lambda run: run.log(record))
        if self.wandb is not None:
            self.wandb.log(record)

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        """FINISHED, or FAILED when the loop raised (a crash, or the agreed stop of a preemption or a cancel). W&B's
        run is finished here either way: its service writes the offline file as it ends, and a run's processes
        are stopped (local cancel, SLURM's end of job) once the trainer exits."""
        ok = kind is None
        self._try(lambda run: run.set_status("FINISHED" if ok else "FAILED"))
        if self.wandb is not None:
            self.wandb.finish(ok=ok)


def mark_failed(env: Mapping[str, str], say: Callable[[str], None]) -> None:
    """The launcher's word when its workers failed: the MLflow run FAILED (until an attempt starts it again)."""
    run = MlflowRun.from_env(env)
    if run is None:
        return
    try:
        run.set_status("FAILED")
        say(f"tracker: MLflow run {run.run_id} marked FAILED")
    except TrackerError as exc:
        say(f"tracker: cannot mark the MLflow run FAILED: {exc}")
