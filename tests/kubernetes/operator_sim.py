"""Playing the training operator against kapi: pods with the operator's labels, pod phases, job conditions."""

from __future__ import annotations

from typing import Any

from kubernetes import client, config
from trainctl.targets.kubernetes.render import GROUP, OP_JOB_NAME, OP_REPLICA_INDEX, OP_REPLICA_TYPE, PLURAL, VERSION

LOG_ANNOTATION = "fake.kubelet/log"


class Operator:
    def __init__(self, kubeconfig: str, namespace: str) -> None:
        self.api = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.ns = namespace

    def create_pod(self, job: str, rtype: str, index: int, log: str = "", phase: str = "Pending") -> str:
        name = f"{job}-{rtype.lower()}-{index}"
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {OP_JOB_NAME: job, OP_REPLICA_TYPE: rtype.lower(), OP_REPLICA_INDEX: str(index)},
                "annotations": {LOG_ANNOTATION: log},
            },
            "spec": {"containers": [{"name": "pytorch", "image": "trainer"}]},
        }
        self.core.create_namespaced_pod(self.ns, body)
        self.set_phase(name, phase)
        return name

    def set_phase(self, pod: str, phase: str) -> None:
        # kapi stores pods without a status subresource: the phase is written on the pod itself.
        self.core.patch_namespaced_pod(pod, self.ns, {"status": {"phase": phase}})

    def set_log(self, pod: str, text: str) -> None:
        self.core.patch_namespaced_pod(pod, self.ns, {"metadata": {"annotations": {LOG_ANNOTATION: text}}})

    def add_condition(self, job: str, ctype: str, reason: str, message: str, status: str = "True") -> None:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, job)
        conditions = list((obj.get("status") or {}).get("conditions") or [])
        # The operator keeps one entry per type; Running/Restarting flip to False when the job moves on.
        for c in conditions:
            if c["type"] in ("Running", "Restarting", "Suspended") and ctype != c["type"]:
                c["status"] = "False"
        conditions = [c for c in conditions if c["type"] != ctype]
        conditions.append(
            {"type": ctype, "status": status, "reason": reason, "message": message,
             "lastTransitionTime": "2026-11-21T12:00:00Z", "lastUpdateTime": "2026-11-21T12:00:00Z"}
        )  # fmt: skip
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.ns, PLURAL, job, {"status": {"conditions": conditions}},
        )  # fmt: skip
