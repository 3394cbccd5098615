"""The Kubernetes target: a Kubeflow Trainer v2 TrainJob (or a v1 PyTorchJob). render.py is pure; engine.py imports `kubernetes` lazily."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ...spec.job_spec import JobSpec
from ..base import Rendered, SubmitOptions, Target
from .render import render
from .section import KubernetesSection

if TYPE_CHECKING:
    from ...runs.state import RunRef
    from ..transfer import Accept, Fetched


SWEEP_LABEL = "trainctl.io/sweep"
TRIAL_LABEL = "trainctl.io/trial"


class KubernetesOptions(SubmitOptions):
    context: str | None = Field(None, description="kubeconfig context; default: the job's, else the current one.")
    namespace: str | None = Field(None, description="Namespace; default: kubernetes.namespace.")
    kubeconfig: str | None = Field(None, description="kubeconfig file; default: KUBECONFIG or ~/.kube/config.")
    dry_run: bool = Field(False, description="Server-side dry run: validated by the API server, nothing stored.")
    force: bool = Field(False, description="Take over fields another manager owns (server-side apply force).")
    apply: bool = Field(
        False,
        description="Apply the job under its own name (`trainctl k8s apply`): that object is the run, and applying "
        "again updates it; default: a new object <name>-<4 hex> per submit, a new run with its own PVC folder.",
    )


class KubernetesTarget(Target[KubernetesOptions]):
    name = "kubernetes"
    section = KubernetesSection
    options = KubernetesOptions

    def render(self, job: JobSpec) -> Rendered:
        return render(job)

    def check_inputs(self, job: JobSpec, options: KubernetesOptions) -> list[str]:
        """A missing bucket or object of an s3:// input (exit 2 before anything is applied); credentials are the
        pods' own (IRSA, the node's role, `secrets:`), so only what is certain from here is a problem."""
        from ..program import s3_data
        from ..s3_inputs import problems

        return problems(s3_data(job), here_reads_it=False)

    def advice(self, job: JobSpec) -> list[str]:
        """An absolute data path no volume of the pods provides (mounts.py)."""
        from .mounts import unmounted_inputs

        return unmounted_inputs(job)

    def engine(self) -> ModuleType:
        from . import engine

        return engine

    def schedule(self, job: JobSpec, options: KubernetesOptions) -> RunRef:
        return self.engine().submit(job, **options.model_dump())

    def trial_job(self, job: JobSpec, sweep_id: str, index: int) -> JobSpec:
        """Labels on the trial's TrainJob (or PyTorchJob) and pods: `trainctl.io/sweep` (the sweep's id, its last
        63 characters) and `trainctl.io/trial`, so `kubectl get trainjobs -l trainctl.io/sweep=...` lists them."""
        sec = job.section_as("kubernetes", KubernetesSection)
        value = sweep_id.removeprefix("sweep:")[-63:].lstrip("-_.")
        labels = {**sec.labels, SWEEP_LABEL: value, TRIAL_LABEL: str(index)}
        return job.model_copy(update={"kubernetes": sec.model_copy(update={"labels": labels})})

    def queues_trials(self, job: JobSpec) -> bool:
        """With kubernetes.kueue_queue, Kueue admits the trials as its quota allows: all are submitted at once."""
        return bool(job.section_as("kubernetes", KubernetesSection).kueue_queue)

    def schedule_continuing(
        self, job: JobSpec, options: KubernetesOptions, source: RunRef
    ) -> tuple[RunRef, str] | None:
        """A Kubernetes source run on the same PVC: the new run's pods copy its checkpoints (seed.py)."""
        if source.target != "kubernetes":
            return None
        from ..transfer import ResumeError
        from .handle import KubernetesHandle  # here: a render loads no run records

        sec = (
            self.engine()
            .with_section(job, options.context, options.namespace)
            .section_as("kubernetes", KubernetesSection)
        )
        ns, pvc, mount = sec.namespace, sec.pvc, sec.pvc_mount_path
        handle = KubernetesHandle.of(source)
        theirs = source.paths.checkpoint_dir
        where = (source.native_id.partition("/")[0], handle.pvc)
        if not theirs or handle.pvc is None:
            raise ResumeError(
                f"--resume-from {source.id}: it kept its checkpoints on its pods' emptyDir (no kubernetes.pvc), "
                "which went with them; nothing is left to continue from"
            )
        if where != (ns, pvc):
            raise ResumeError(
                f"--resume-from {source.id}: its checkpoints are on PVC {where[1]!r} in namespace {where[0]!r}, "
                f"and this run mounts {pvc!r} in {ns!r}: submit it there, or copy the folder {theirs} across "
                "by hand (kubectl cp through a pod that mounts both) and set checkpoint.dir to it"
            )
        seed = f"{mount}/{str(theirs).removeprefix(str(handle.pvc_mount_path or mount)).lstrip('/')}"
        run = self.engine().submit(job, **options.model_dump(), seed=seed)
        return run, f"pvc://{pvc}{seed.removeprefix(mount)}"

    def creates_run(self, options: KubernetesOptions) -> bool:
        return not options.dry_run  # a server-side dry run stores nothing: there is no run to record

    def logs(self, run: RunRef, follow: bool = False, rank: int | None = None) -> Iterator[str]:
        from .logs import logs  # every pod's log, or one node rank's

        return logs(run, follow=follow, rank=rank)

    def list_jobs(self, context: str | None, namespace: str | None) -> list[dict[str, Any]]:
        """Every TrainJob and PyTorchJob of the namespace (default: the section's), trainctl's or not."""
        from .cluster import connect

        return self.engine().list_jobs(connect(context, namespace or KubernetesSection().namespace))

    def place_checkpoint(self, job: JobSpec, files: Path, subdir: str) -> str:
        from ..transfer import ResumeError

        raise ResumeError(
            f"--resume-from: a Kubernetes run takes a checkpoint from another Kubernetes run on its PVC only; copy "
            f"{files} by hand into the job's checkpoint.dir{'/' + subdir if subdir else ''} on the PVC (kubectl cp "
            "into a pod that mounts it) and submit without --resume-from: checkpoint.resume: auto takes the newest"
        )

    def fetch_checkpoints(self, run: RunRef, dest: Path, accept: Accept | None = None) -> Fetched:
        from ..transfer import ResumeError

        raise ResumeError(
            f"--resume-from {run.id}: trainctl cannot copy a Kubernetes run's checkpoints off its PVC; copy its "
            "checkpoint folder to this machine (kubectl cp from a pod that mounts it), set checkpoint.dir to "
            "that folder and submit without --resume-from: checkpoint.resume: auto takes the newest"
        )

    def fetch_output(self, run: RunRef, dest: Path) -> Fetched:
        """Through a short-lived reader pod's log (output_pull.py): no pods/exec, which `kubectl cp` needs."""
        from .output_pull import fetch_output

        return fetch_output(run, dest)


TARGET = KubernetesTarget()
