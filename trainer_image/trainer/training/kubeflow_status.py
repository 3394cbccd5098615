"""Progress into a Kubeflow TrainJob's `status.trainerStatus` (Kubeflow Trainer >= 2.2, `TrainJobStatus` gate).

The contract is Kubeflow Trainer v2.3.0's (proposals/2779-trainjob-progress, docs/user-guides/trainjob-progress.md):
with the gate on, the controller's `trainjobstatus` plugin (pkg/runtime/framework/plugins/trainjobstatus/
trainjobstatus.go, `createEnvVars`) gives the trainer containers `KUBEFLOW_TRAINER_SERVER_URL`,
`KUBEFLOW_TRAINER_SERVER_CA_CERT` (a file) and `KUBEFLOW_TRAINER_SERVER_TOKEN` (a projected service-account
token file, which rotates: read it for every request); a POST of `{"trainerStatus": {...}}` with that bearer
token is applied to the TrainJob's status by the status server (pkg/statusserver/server.go,
`handleTrainJobRuntimeStatus`). Fields (pkg/apis/trainer/v1alpha1/trainjob_types.go `TrainerStatus`):
progressPercentage and estimatedRemainingSeconds are int32 (0-100, >= 0), metrics a list of {name, value}
with string values of 1-64 characters, lastUpdatedTime required. As the guide asks, at most one request
every 5 s, sent from a thread so a slow or failing server never stalls a step; failures are logged once.
Without the variables (gate off, any other platform) nothing is sent.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
import urllib.request
from datetime import datetime, timezone
from typing import Any

from ..log import log

URL_ENV, CA_ENV, TOKEN_ENV = (
    "KUBEFLOW_TRAINER_SERVER_URL",
    "KUBEFLOW_TRAINER_SERVER_CA_CERT",
    "KUBEFLOW_TRAINER_SERVER_TOKEN",
)
EVERY_S = 5.0
METRICS = ("step", "total_steps", "epoch", "loss", "samples_per_s")


def trainer_status(fields: dict[str, Any]) -> dict[str, Any]:
    """The `UpdateTrainJobStatusRequest` body for the reporter's fields."""
    step, total = fields["step"], fields["total_steps"]
    status: dict[str, Any] = {
        "progressPercentage": max(0, min(100, int(100 * step / total))) if total else 0,
        "metrics": [
            {"name": name, "value": f"{value:.6g}" if isinstance(value, float) else str(value)}
            for name in METRICS
            if (value := fields.get(name)) is not None
        ],
        "lastUpdatedTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if fields.get("eta_s") is not None:
        status["estimatedRemainingSeconds"] = max(0, min(2**31 - 1, round(fields["eta_s"])))
    return {"trainerStatus": status}


class KubeflowStatus:
    """Posts the newest fields at most every `EVERY_S` seconds (and the last step's), from one thread."""

    def __init__(self, url: str, ca_file: str, token_file: str, rank: int) -> None:
        self.url, self.ca_file, self.token_file, self.rank = url, ca_file, token_file, rank
        self.sent = -EVERY_S
        self.failed = False
        self._busy = threading.Lock()

    @classmethod
    def from_env(cls, rank: int) -> KubeflowStatus | None:
        url, ca, token = (os.environ.get(name) for name in (URL_ENV, CA_ENV, TOKEN_ENV))
        return cls(url, ca, token, rank) if url and ca and token else None

    def __call__(self, fields: dict[str, Any]) -> None:
        last = fields["step"] >= fields["total_steps"]
        now = time.monotonic()
        if not last and now - self.sent < EVERY_S:
            return
        self.sent = now
        body = json.dumps(trainer_status(fields)).encode()
        if last:
            self.post(body)  # the 100 % is not left to a thread the process exit would cut off
        elif self._busy.acquire(blocking=False):
            threading.Thread(target=self._post_then_release, args=(body,), daemon=True).start()

    def _post_then_release(self, body: bytes) -> None:
        try:
            self.post(body)
        finally:
            self._busy.release()

    def post(self, body: bytes) -> None:
        try:
            with open(self.token_file) as f:
                token = f.read().strip()
            request = urllib.request.Request(
                self.url, data=body, method="POST",
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )  # fmt: skip
            context = ssl.create_default_context(cafile=self.ca_file)
            with urllib.request.urlopen(request, timeout=5, context=context) as answer:
                answer.read()
        except Exception as exc:  # reporting must never break training
            if not self.failed:
                self.failed = True
                log(self.rank, f"TrainJob progress not reported to {self.url}: {exc}")
