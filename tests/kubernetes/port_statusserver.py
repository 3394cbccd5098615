"""Kubeflow Trainer v2.3.0's TrainJob progress (alpha gate `TrainJobStatus`, proposals/2779-trainjob-progress),
ported: the plugin that wires the trainer containers to the status server, and the server that writes what
they POST into `TrainJob.status.trainerStatus` on the (real, test) API server, whose CRD validates it.

Each step cites its upstream file and function (github.com/kubeflow/trainer, tag v2.3.0). Stand-ins, named:
the projected service-account token (a JWT the API server signs for the TrainJob's audience, verified by the
server over OIDC in auth.go) is a random token this port issues per audience and namespace; the TLS
certificate (the webhook's, cert-controller rotated) is a self-signed one for the service name and 127.0.0.1;
there is no cluster DNS here, so the client reaches the service name's path at 127.0.0.1.
"""

from __future__ import annotations

import datetime
import json
import re
import secrets
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
# pkg/runtime/framework/plugins/trainjobstatus/trainjobstatus.go constants
ENV_URL, ENV_CA, ENV_TOKEN = (
    "KUBEFLOW_TRAINER_SERVER_URL",
    "KUBEFLOW_TRAINER_SERVER_CA_CERT",
    "KUBEFLOW_TRAINER_SERVER_TOKEN",
)
CONFIG_MOUNT_PATH, CA_CERT_FILE, TOKEN_FILE = "/var/run/secrets/kubeflow/trainer", "ca.crt", "token"
TOKEN_VOLUME, TOKEN_EXPIRY_S = "kubeflow-trainer-token", 3600
MAX_BODY = 1 << 16  # pkg/statusserver/server.go maxBodySize
FIELD_OWNER = "trainer-status"  # server.go handleTrainJobRuntimeStatus: client.FieldOwner("trainer-status")


def token_audience(namespace: str, name: str) -> str:
    """pkg/statusserver/utils.go TokenAudience."""
    return f"trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def status_url(namespace: str, name: str) -> str:
    """pkg/statusserver/utils.go StatusUrl."""
    return f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def env_vars(trainjob: dict[str, Any], service: str, operator_ns: str, port: int) -> list[dict[str, str]]:
    """trainjobstatus.go createEnvVars: the status URL (the webhook service's name), the CA and token files."""
    meta = trainjob["metadata"]
    url = f"https://{service}.{operator_ns}.svc:{port}" + status_url(meta["namespace"], meta["name"])
    return [
        {"name": ENV_URL, "value": url},
        {"name": ENV_CA, "value": f"{CONFIG_MOUNT_PATH}/{CA_CERT_FILE}"},
        {"name": ENV_TOKEN, "value": f"{CONFIG_MOUNT_PATH}/{TOKEN_FILE}"},
    ]


def enforce_ml_policy(
    jobset: dict[str, Any], trainjob: dict[str, Any], service: str, operator_ns: str, port: int
) -> None:
    """trainjobstatus.go EnforceMLPolicy: into every container of the pod set whose ancestor is the trainer
    (runtime.Info FindPodSetByAncestor(constants.AncestorTrainer)) upsert the env vars and the token mount, and
    the projected volume (createTokenVolumeMount, createTokenVolume) into its pod spec."""
    from port_trainer import ANCESTOR_TRAINER, LABEL_ANCESTOR, _upsert, upsert_env

    name = trainjob["metadata"]["name"]
    volume = {
        "name": TOKEN_VOLUME,
        "projected": {"sources": [
            {"serviceAccountToken": {"audience": token_audience(trainjob["metadata"]["namespace"], name),
                                     "expirationSeconds": TOKEN_EXPIRY_S, "path": TOKEN_FILE}},
            {"configMap": {"name": f"{name}-tls-config", "items": [{"key": "ca.crt", "path": CA_CERT_FILE}]}},
        ]},
    }  # fmt: skip
    for rjob in jobset["spec"]["replicatedJobs"]:
        # the pod set's Ancestor is the replicated Job template's label (trainingruntime.go newRuntimeInfo)
        if ((rjob["template"].get("metadata") or {}).get("labels") or {}).get(LABEL_ANCESTOR) != ANCESTOR_TRAINER:
            continue
        pod = rjob["template"]["spec"]["template"]["spec"]
        for container in pod["containers"]:
            upsert_env(container.setdefault("env", []), *env_vars(trainjob, service, operator_ns, port))
            mount = {"name": TOKEN_VOLUME, "mountPath": CONFIG_MOUNT_PATH, "readOnly": True}
            _upsert(container.setdefault("volumeMounts", []), mount, lambda a, b: a["name"] == b["name"])
        _upsert(pod.setdefault("volumes", []), volume, lambda a, b: a["name"] == b["name"])


def self_signed(directory: Path, dns_name: str) -> tuple[Path, Path]:
    """(cert, key) for `dns_name` and 127.0.0.1: the stand-in for the webhook certificate the server reuses."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(dns_name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class StatusServer:
    """pkg/statusserver/server.go Server: POST StatusUrl({namespace}, {name}) only, TLS, 64 KiB bodies."""

    def __init__(self, custom_api: Any, cert: Path, key: Path) -> None:
        self.custom = custom_api
        self.tokens: dict[str, tuple[str, str]] = {}  # token -> (audience, namespace): the stand-in for OIDC
        self.applied: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                code, body = owner.handle(self.path, self.headers.get("Authorization", ""), self._body())
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes | None:
                length = int(self.headers.get("Content-Length") or 0)
                return None if length > MAX_BODY else self.rfile.read(length)  # bodySizeLimitMiddleware

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def issue_token(self, namespace: str, name: str) -> str:
        """What the kubelet's projected serviceAccountToken source gives the pod (audience-bound, namespaced)."""
        token = secrets.token_urlsafe(32)
        self.tokens[token] = (token_audience(namespace, name), namespace)
        return token

    def authorize(self, header: str, namespace: str, name: str) -> bool:
        """auth.go Authorize: extractRawToken (one case-insensitive Bearer credential), the audience of this
        TrainJob (oidc Verifier ClientID = TokenAudience), and the token's namespace claim equal to its own."""
        parts = header.split()
        raw = parts[1] if len(parts) == 2 and parts[0].lower() == "bearer" else ""
        return self.tokens.get(raw) == (token_audience(namespace, name), namespace)

    def handle(self, path: str, authorization: str, body: bytes | None) -> tuple[int, dict[str, Any]]:
        """server.go handleTrainJobRuntimeStatus, with badRequest's metav1.Status answers."""
        found = re.fullmatch(r"/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs/([^/]+)/status", path)
        if found is None:  # handleDefault
            return _failure("Not found", "NotFound", 404)
        if body is None:
            return _failure("Request body too large", "RequestEntityTooLarge", 413)
        namespace, name = found[1], found[2]
        if not self.authorize(authorization, namespace, name):
            return _failure("Forbidden", "Forbidden", 403)
        try:
            request = json.loads(body)
            assert isinstance(request, dict)
        except (ValueError, AssertionError):
            return _failure("Invalid payload", "Invalid", 422)
        if request.get("trainerStatus") is None:  # an empty update: success, nothing applied
            return 200, request
        from kubernetes.client.exceptions import ApiException

        patch = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob", "metadata": {"name": name, "namespace": namespace},
                 "status": {"trainerStatus": to_apply_config(request["trainerStatus"])}}  # fmt: skip
        try:  # client.Status().Apply(..., client.ForceOwnership, client.FieldOwner("trainer-status"))
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "trainjobs", name, patch, field_manager=FIELD_OWNER, force=True,
                _content_type="application/apply-patch+yaml",
            )  # fmt: skip
        except ApiException as exc:
            if exc.status in (400, 422):
                return _failure(json.loads(exc.body or "{}").get("message") or str(exc), "Invalid", 422)
            if exc.status == 404:
                return _failure("Train job not found", "NotFound", 404)
            return _failure("Internal error", "InternalError", 500)
        self.applied.append(patch["status"]["trainerStatus"])
        return 200, request

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def to_apply_config(status: dict[str, Any]) -> dict[str, Any]:
    """server.go toApplyConfig: the two numbers when set, each metric's name and value, and lastUpdatedTime
    always (a missing one is Go's zero time, which the CRD's rule `has(self.lastUpdatedTime)` refuses)."""
    out: dict[str, Any] = {}
    for key in ("progressPercentage", "estimatedRemainingSeconds"):
        if status.get(key) is not None:
            out[key] = status[key]
    if status.get("metrics"):
        out["metrics"] = [{"name": m.get("name"), "value": m.get("value")} for m in status["metrics"]]
    out["lastUpdatedTime"] = status.get("lastUpdatedTime")
    return out


def _failure(message: str, reason: str, code: int) -> tuple[int, dict[str, Any]]:
    return code, {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
