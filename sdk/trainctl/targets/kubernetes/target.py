"""The Kubernetes target: a Kubeflow Trainer v2 TrainJob (or a v1 PyTorchJob). render.py is pure; engine.py imports `kubernetes` lazily."""

from __future__ import annotations

from types import ModuleType

from pydantic import Field

from ...run_state import RunRef
from ...spec import JobSpec
from ..base import Rendered, SubmitOptions, Target
from .render import render
from .section import KubernetesSection


class KubernetesOptions(SubmitOptions):
    context: str | None = Field(None, description="kubeconfig context; default: the job's, else the current one.")
    namespace: str | None = Field(None, description="Namespace; default: kubernetes.namespace.")
    kubeconfig: str | None = Field(None, description="kubeconfig file; default: KUBECONFIG or ~/.kube/config.")
    dry_run: bool = Field(False, description="Server-side dry run: validated by the API server, nothing stored.")
    force: bool = Field(False, description="Take over fields another manager owns (server-side apply force).")


class KubernetesTarget(Target[KubernetesOptions]):
    name = "kubernetes"
    section = KubernetesSection
    options = KubernetesOptions

    def render(self, job: JobSpec) -> Rendered:
        return render(job)

    def engine(self) -> ModuleType:
        from . import engine

        return engine

    def schedule(self, job: JobSpec, options: KubernetesOptions) -> RunRef:
        return self.engine().submit(job, **options.model_dump())


TARGET = KubernetesTarget()
