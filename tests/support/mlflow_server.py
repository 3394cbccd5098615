"""A real MLflow tracking server for the tracking tests: `mlflow server` with a SQLite store on 127.0.0.1, run
from the small venv scripts/setup.sh makes (.venv-mlflow: the server's dependencies stay out of the test venv),
and what the tests ask it, through the same REST API trainctl uses."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VENV = Path(__file__).resolve().parents[2] / ".venv-mlflow"


@dataclass
class MlflowServer:
    uri: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def python(self) -> Path:
        """The venv's Python, with the real MLflow client (a `command:` job's own tracker calls)."""
        return VENV / "bin" / "python"

    def get(self, endpoint: str, **query: Any) -> Any:
        url = f"{self.uri}/api/2.0/mlflow/{endpoint}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=30) as answer:
            return json.loads(answer.read())

    def post(self, endpoint: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            f"{self.uri}/api/2.0/mlflow/{endpoint}", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read() or b"{}")

    def new_run(self, experiment: str) -> str:
        """A run in a new experiment, as trainctl's submit leaves it (RUNNING); its id."""
        found = self.post("experiments/create", {"name": experiment})["experiment_id"]
        return str(self.post("runs/create", {"experiment_id": found})["run"]["info"]["run_id"])

    def run(self, run_id: str) -> dict[str, Any]:
        """The run as the server holds it: info, params and tags as dicts."""
        found = self.get("runs/get", run_id=run_id)["run"]
        data = found.get("data", {})
        return {
            "info": found["info"],
            "params": {p["key"]: p["value"] for p in data.get("params", [])},
            "tags": {t["key"]: t["value"] for t in data.get("tags", [])},
        }

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """(step, value) of every value logged for the metric, in the order the server keeps them."""
        found = self.get("metrics/get-history", run_id=run_id, metric_key=key, max_results=25000)
        return sorted((int(m["step"]), float(m["value"])) for m in found.get("metrics", []))

    def runs(self, experiment: str) -> list[dict[str, Any]]:
        exp = self.get("experiments/get-by-name", experiment_name=experiment)["experiment"]["experiment_id"]
        return list(self.post("runs/search", {"experiment_ids": [exp], "max_results": 100}).get("runs", []))

    def stop(self) -> None:
        """The server and its workers (its own session, started here): SIGTERM, then SIGKILL after 5 s."""
        for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 30)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue


def start(folder: Path, timeout: float = 180) -> MlflowServer:
    """`mlflow server` on a free 127.0.0.1 port, its store and artifacts in `folder`; returns once it answers."""
    mlflow = VENV / "bin" / "mlflow"
    if not mlflow.exists():
        raise FileNotFoundError(f"{mlflow}: run scripts/setup.sh (it makes the MLflow server's venv)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = folder / "mlflow-server.log"
    argv = [
        str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}", "--default-artifact-root", str(folder / "artifacts"),
    ]  # fmt: skip
    # Without its job runner (mlflow/server/__init__.py `_run_server`: MLFLOW_SERVER_ENABLE_JOB_EXECUTION, on by
    # default, starts a runner and seven huey consumers, about 27 CPU-s, for the server-side jobs of MLflow's GenAI
    # features); the tracking API these tests and trainctl use is served the same either way.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    process = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True, env=env)
    server = MlflowServer(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{server.uri}/health", timeout=5) as answer:
                if answer.status == 200:
                    return server
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"mlflow server did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
