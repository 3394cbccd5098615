"""Kubernetes API errors -> messages a person can act on. No kubernetes import: works on any object with
`status`, `reason` and `body` (the client's ApiException), so it is testable with the real exception class."""

from __future__ import annotations

import json
import re
from typing import Any

from ...errors import EngineError

CRD_NAME = "pytorchjobs.kubeflow.org"
CRD_HINT = (
    "install the Kubeflow Training Operator (v1.9.4), which brings the PyTorchJob CRD: "
    'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=v1.9.4"'
)
TRAINJOB_CRD_NAME = "trainjobs.trainer.kubeflow.org"
TRAINJOB_CRD_HINT = (
    "install Kubeflow Trainer v2.3.0, which brings the TrainJob CRD: "
    'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/manifests/overlays/manager?ref=v2.3.0", '
    "then trainctl's runtimes: kubectl apply -k k8s/ (or set kubernetes.api: pytorchjob)"
)
_CRDS = {CRD_NAME: ("PyTorchJob", CRD_HINT), TRAINJOB_CRD_NAME: ("TrainJob", TRAINJOB_CRD_HINT)}


def _status_body(exc: Any) -> dict[str, Any]:
    """The metav1.Status the server sent, or {} when the body is not one (e.g. `404 page not found`)."""
    try:
        body = json.loads(getattr(exc, "body", None) or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def rejected_fields(exc: Any) -> list[str]:
    """`field: message` for each cause of a 422 (or 400 strict-decoding) Status."""
    status = _status_body(exc)
    causes = (status.get("details") or {}).get("causes") or []
    lines = []
    for cause in causes:
        field = cause.get("field") or "(object)"
        lines.append(f"{field}: {cause.get('message') or cause.get('reason') or 'rejected'}")
    message = str(status.get("message") or "")
    if not lines and "typed patch" in message:
        # server-side apply reports type mismatches as "errors:\n  .spec.x: expected ..., got ..."
        # (one error: "...Kind=PyTorchJob): .spec.x: expected ...")
        lines = [f"{f}: {m}" for f, m in re.findall(r"(?:^|\s)\.((?:spec|metadata|status)\S*): (.*)$", message, re.M)]
    if not lines and message:
        lines.append(message)
    return list(dict.fromkeys(lines))


def api_error(
    exc: Any,
    *,
    verb: str,
    resource: str,
    namespace: str | None,
    name: str | None = None,
    context: str | None = None,
    crd_installed: bool | None = None,
) -> EngineError:
    """One EngineError for an ApiException, naming what was attempted and what to do about it.

    `crd_installed=False` (found out by the caller through discovery) turns a 404 into "the CRD is missing".
    """
    code = int(getattr(exc, "status", 0) or 0)
    status = _status_body(exc)
    server_says = str(status.get("message") or getattr(exc, "reason", "") or "").strip()
    where = f" in namespace {namespace!r}" if namespace else ""
    target = f"{resource}/{name}" if name else resource
    ctx = f" (kube context {context!r})" if context else ""
    if code == 401:
        return EngineError(
            f"401 Unauthorized: the API server rejected the credentials of the kubeconfig{ctx}",
            hint="log in again or refresh the token (e.g. your cloud's `get-credentials` command)",
        )
    if code == 403:
        return EngineError(
            f"403 Forbidden: you may not {verb} {resource}{where}{ctx}: {server_says}",
            hint=f"check with `kubectl auth can-i {verb} {resource}{' -n ' + namespace if namespace else ''}`; "
            "k8s/rbac.yaml has a `trainctl-submitter` Role to bind to you",
        )
    if code == 404:
        if crd_installed is False:
            kind, hint = _CRDS.get(resource, _CRDS[CRD_NAME])
            return EngineError(
                f"404 Not Found: the {kind} CRD ({resource}) is not installed in this cluster{ctx}", hint=hint
            )
        return EngineError(f"404 Not Found: {target} does not exist{where}{ctx}")
    if code == 409:
        return EngineError(
            f"409 Conflict on {verb} {target}{where}: {server_says}",
            hint="another field manager owns these fields; rerun with --force to take them over",
        )
    if code in (400, 422) or (code == 500 and "typed patch" in server_says):
        fields = rejected_fields(exc)
        listing = "".join(f"\n  - {line}" for line in fields) or f" {server_says}"
        kind = {400: "Bad Request", 422: "Invalid"}.get(code, "Internal Server Error")
        return EngineError(f"{code} {kind}: the API server rejected {target}; rejected fields:{listing}")
    return EngineError(f"{code or 'error'} {getattr(exc, 'reason', '')}: {verb} {target}{where} failed: {server_says}")
