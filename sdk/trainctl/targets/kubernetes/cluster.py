"""A connection to one Kubernetes cluster: the official client, and its errors turned into EngineErrors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ...errors import EngineError
from .errors import api_error
from .kinds import KINDS

TIMEOUT = 30
CRD_RESOURCES = {k.resource: k for k in KINDS.values()}
T = TypeVar("T")


@dataclass
class Cluster:
    """A connection to one cluster: the client, the kube context it came from, and the namespace."""

    api: Any
    context: str | None
    namespace: str
    kubeconfig: str | None = None

    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api)

    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api)

    def get(self, path: str, query: Sequence[tuple[str, Any]] = (), *, verb: str, resource: str,
            name: str | None = None, timeout: float | None = TIMEOUT) -> Any:  # fmt: skip
        """GET an API path (`/api/v1/namespaces/ns/pods`) through the kubeconfig's ApiClient (its auth, TLS and
        proxy), answered as the server sent it: a urllib3 response, read (`.data`) or streamed (`.stream()`).
        For the reads `status` and `logs` make of pods and events: the generated `CoreV1Api` they used builds
        about 400 validated methods when first imported, 1-2 s of a fresh `trainctl status` here, and its
        models then cost 0.43 s more for 1,024 pods (bench/scale/k8s_size.py). Errors as `call` gives them."""
        from kubernetes.client.exceptions import ApiException

        def request() -> Any:
            method, url, headers, body, post = self.api.param_serialize(
                "GET", path, query_params=list(query), header_params={"Accept": "application/json, */*"},
                auth_settings=["BearerToken"],
            )  # fmt: skip
            resp = self.api.call_api(method, url, headers, body, post, _request_timeout=timeout)
            if not 200 <= resp.status <= 299:
                text = resp.read().decode("utf-8", "replace")
                raise ApiException.from_response(http_resp=resp, body=text, data=None)
            return resp.response

        return self.call(request, verb=verb, resource=resource, name=name)

    def call(self, fn: Callable[..., T], *args: Any, verb: str, resource: str, name: str | None = None, **kw: Any) -> T:
        """Call the API, turning its errors (and unreachable servers) into EngineErrors."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, **kw)
        except ApiException as exc:
            crd = self.crd_installed(resource) if exc.status == 404 and resource in CRD_RESOURCES else None
            raise api_error(
                exc,
                verb=verb,
                resource=resource,
                namespace=self.namespace,
                name=name,
                context=self.context,
                crd_installed=crd,
            ) from None
        except HTTPError as exc:
            raise EngineError(
                f"cannot reach the Kubernetes API server at {self.api.configuration.host}: {exc}",
                hint="check the kubeconfig context (--context) and that the cluster is up",
            ) from None

    def crd_installed(self, resource: str) -> bool | None:
        """Whether discovery lists the resource (e.g. trainjobs in trainer.kubeflow.org/v1alpha1); None when
        discovery itself fails."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kind = CRD_RESOURCES[resource]
        try:
            found = client.CustomObjectsApi(self.api).get_api_resources(
                kind.group, kind.version, _request_timeout=TIMEOUT
            )
        except ApiException as exc:
            return False if exc.status == 404 else None
        except HTTPError:  # unreachable: the call that follows says so
            return None
        return any(r.name == kind.plural for r in (found.resources or []))


def connect(context: str | None = None, namespace: str = "default", kubeconfig: str | None = None) -> Cluster:
    """A client from the kubeconfig (KUBECONFIG, ~/.kube/config) or, inside a pod, the service account."""
    import os

    from kubernetes import config

    try:
        if (
            kubeconfig is None
            and context is None
            and "KUBERNETES_SERVICE_HOST" in os.environ
            and not (os.environ.get("KUBECONFIG") or os.path.exists(os.path.expanduser("~/.kube/config")))
        ):
            config.load_incluster_config()
            from kubernetes import client

            return Cluster(client.ApiClient(), None, namespace)
        # KUBECONFIG is read now, not when the client was imported (it may have changed since).
        source = kubeconfig or os.environ.get("KUBECONFIG") or None
        api = config.new_client_from_config(config_file=source, context=context)
    except (config.ConfigException, OSError, TypeError) as exc:
        raise EngineError(
            f"cannot load the kubeconfig{f' context {context!r}' if context else ''}: {exc}",
            hint="set KUBECONFIG or --context to a cluster you can reach (`kubectl config get-contexts`)",
        ) from None
    return Cluster(api, context, namespace, kubeconfig)
