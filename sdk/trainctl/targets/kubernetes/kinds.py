"""The two Kubeflow job kinds trainctl submits, as data: API coordinates, the main container, how their
pods are labelled and ranked. Pure (no kubernetes import), shared by the engine and the status reader."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import pytorchjob as pj
from . import trainjob as tj


@dataclass(frozen=True)
class Kind:
    api: str  # the kubernetes.api value
    kind: str
    group: str
    version: str
    plural: str
    container: str
    pod_label: str  # pods carry <pod_label>=<job name>

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}"

    def selector(self, name: str) -> str:
        return f"{self.pod_label}={name}"

    def pod_key(self, labels: dict[str, str], annotations: dict[str, str]) -> tuple[int, int, str]:
        """(order, index, display label): TrainJob pods by node rank (the Job completion index, which the
        Trainer passes as PET_NODE_RANK); PyTorchJob pods Master first, then Workers by replica index."""
        if self.api == "trainjob":
            index = _int(annotations.get(tj.COMPLETION_INDEX) or labels.get(tj.COMPLETION_INDEX))
            return (0, index, f"node-{index}")
        rtype = str(labels.get(pj.OP_REPLICA_TYPE, "worker")).capitalize()
        index = _int(labels.get(pj.OP_REPLICA_INDEX))
        return (0 if rtype == "Master" else 1, index, f"{rtype}-{index}")


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


TRAINJOB = Kind("trainjob", tj.KIND, tj.GROUP, tj.VERSION, tj.PLURAL, tj.NODE, tj.JOBSET_NAME_LABEL)
PYTORCHJOB = Kind("pytorchjob", pj.KIND, pj.GROUP, pj.VERSION, pj.PLURAL, pj.CONTAINER, pj.OP_JOB_NAME)
KINDS = {k.api: k for k in (TRAINJOB, PYTORCHJOB)}
