"""API errors become messages: 404 without the CRD (a real server without it), 403 naming verb and resource."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3
from k8s_testlib import REPO, start_kapi, stop_kapi
from kubernetes import client, config
from kubernetes.client import rest
from kubernetes.client.exceptions import ApiException, ForbiddenException
from trainctl import EngineError, Job
from trainctl.run import Run
from trainctl.targets.kubernetes import engine as k8s_engine
from trainctl.targets.kubernetes.errors import api_error
from trainctl.targets.kubernetes.handle import KubernetesHandle


@pytest.fixture(scope="module")
def kapi_without_crd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A second real API server whose PyTorchJob and TrainJob CRDs have been deleted again."""
    directory = tmp_path_factory.mktemp("kapi-nocrd")
    kubeconfig = start_kapi(directory)
    try:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        for crd in ("pytorchjobs.kubeflow.org", "trainjobs.trainer.kubeflow.org"):
            client.ApiextensionsV1Api(api).delete_custom_resource_definition(crd)
        for _ in range(100):
            discovery = client.ApisApi(api).get_api_versions().groups
            if not any(g.name == "kubeflow.org" for g in discovery) and not any(
                r.name == "trainjobs"
                for r in client.CustomObjectsApi(api).get_api_resources("trainer.kubeflow.org", "v1alpha1").resources
            ):
                break
            time.sleep(0.1)
        yield kubeconfig
    finally:
        stop_kapi(directory)


@pytest.mark.kapi
def test_404_says_the_crd_is_not_installed(kapi_without_crd: Path) -> None:
    job = Job.from_yaml(REPO / "examples" / "digits.yaml").with_overrides(["kubernetes.api=pytorchjob"])
    handle = KubernetesHandle(kubeconfig=str(kapi_without_crd), api="pytorchjob")
    for action in (
        lambda: k8s_engine.submit(job, kubeconfig=str(kapi_without_crd)),
        lambda: k8s_engine.status(Run(target="kubernetes", native_id="trainctl/digits", handle=handle)),
        lambda: k8s_engine.cancel(Run(target="kubernetes", native_id="trainctl/digits", handle=handle)),
    ):
        with pytest.raises(EngineError) as info:
            action()
        text = str(info.value)
        assert text.startswith("404 Not Found: the PyTorchJob CRD (pytorchjobs.kubeflow.org) is not installed"), text
        assert "v1.9.4" in text
    trainjob = Job.from_yaml(REPO / "examples" / "digits.yaml")
    bare = Run(
        target="kubernetes", native_id="trainctl/digits", handle=KubernetesHandle(kubeconfig=str(kapi_without_crd))
    )
    for action in (
        lambda: k8s_engine.submit(trainjob, kubeconfig=str(kapi_without_crd)),
        lambda: k8s_engine.status(bare),
    ):
        with pytest.raises(EngineError) as info:
            action()
        text = str(info.value)
        assert text.startswith("404 Not Found: the TrainJob CRD (trainjobs.trainer.kubeflow.org) is not installed"), (
            text
        )
        assert "v2.3.0" in text and "kubectl apply -k k8s/" in text


def _raised_like_the_client(status: int, reason: str, body: dict) -> ApiException:
    """The exception exactly as the client raises it: from a urllib3 response wrapped in its RESTResponse."""
    raw = urllib3.HTTPResponse(
        body=json.dumps(body).encode(), status=status, reason=reason, headers={"Content-Type": "application/json"},
        preload_content=True,
    )  # fmt: skip
    resp = rest.RESTResponse(raw)
    resp.read()
    with pytest.raises(ApiException) as info:
        ApiException.from_response(http_resp=resp, body=resp.data.decode(), data=None)
    return info.value


def test_403_names_the_verb_and_resource() -> None:
    # The mapping for a patch (what the live test below cannot reach: its GET is refused first), on the
    # exception exactly as the client's own factory builds it from a Status body.
    exc = _raised_like_the_client(
        403,
        "Forbidden",
        {
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
            "message": 'pytorchjobs.kubeflow.org "digits" is forbidden: User "alice" cannot patch resource '
            '"pytorchjobs" in API group "kubeflow.org" in the namespace "trainctl"',
            "details": {"name": "digits", "group": "kubeflow.org", "kind": "pytorchjobs"},
        },
    )  # fmt: skip
    assert isinstance(exc, ForbiddenException)
    err = api_error(exc, verb="patch", resource="pytorchjobs.kubeflow.org", namespace="trainctl", name="digits")
    text = str(err)
    assert text.startswith("403 Forbidden: you may not patch pytorchjobs.kubeflow.org in namespace 'trainctl'")
    assert 'User "alice" cannot patch' in text
    assert "kubectl auth can-i patch pytorchjobs.kubeflow.org -n trainctl" in text


def test_other_codes_are_named() -> None:
    exc = _raised_like_the_client(401, "Unauthorized", {"kind": "Status", "code": 401, "message": "Unauthorized"})
    assert str(api_error(exc, verb="get", resource="pods", namespace="x", context="prod")).startswith(
        "401 Unauthorized: the API server rejected the credentials of the kubeconfig (kube context 'prod')"
    )
    exc = _raised_like_the_client(
        409,
        "Conflict",
        {"kind": "Status", "code": 409, "message": 'Apply failed with 1 conflict: conflict with "kubectl"'},
    )
    assert "--force" in str(api_error(exc, verb="patch", resource="pytorchjobs.kubeflow.org", namespace="x"))


@pytest.fixture
def denied_user(kapi: Path, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig for user "bob" whom the server really refuses.

    kapi delegates authorization of anyone outside system:masters to the webhook named in its fixed
    authorization kubeconfig (http://127.1.2.3:12345, loopback); here a SubjectAccessReview endpoint there
    denies every request, so the API server itself answers 403.
    """
    import errno
    import http.server
    import subprocess
    import threading

    class Deny(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            review["status"] = {"allowed": False, "reason": "the test webhook allows only system:masters"}
            data = json.dumps(review).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    try:
        server = http.server.ThreadingHTTPServer(("127.1.2.3", 12345), Deny)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            pytest.skip("127.1.2.3:12345 (kapi's fixed authorization webhook address) is in use by another run")
        raise
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kdir = kapi.parent
    key, csr, crt = tmp_path / "bob.key", tmp_path / "bob.csr", tmp_path / "bob.crt"
    openssl = ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=bob"]
    subprocess.run(openssl, check=True, capture_output=True)
    subprocess.run(
        ["openssl", "x509", "-req", "-in", csr, "-CA", kdir / "ca.crt", "-CAkey", kdir / "ca.key",
         "-CAcreateserial", "-out", crt, "-days", "1"],
        check=True, capture_output=True,
    )  # fmt: skip
    conf = tmp_path / "bob.kubeconfig"
    conf.write_text(
        kapi.read_text().replace(str(kdir / "admin.crt"), str(crt)).replace(str(kdir / "admin.key"), str(key))
    )
    try:
        yield conf
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.kapi
def test_a_real_403_names_the_verb_and_resource(denied_user: Path) -> None:
    job = Job.from_yaml(REPO / "examples" / "digits.yaml")
    with pytest.raises(EngineError) as info:
        k8s_engine.submit(job, kubeconfig=str(denied_user))
    text = str(info.value)
    assert text.startswith("403 Forbidden: you may not get trainjobs.trainer.kubeflow.org in namespace 'trainctl'"), (
        text
    )
    assert 'User "bob" cannot get resource "trainjobs"' in text
    assert "kubectl auth can-i get trainjobs.trainer.kubeflow.org -n trainctl" in text
    run = Run(target="kubernetes", native_id="trainctl/digits", handle=KubernetesHandle(kubeconfig=str(denied_user)))
    with pytest.raises(EngineError, match=r"403 Forbidden: you may not get trainjobs\.trainer\.kubeflow\.org"):
        k8s_engine.status(run)
