"""The SageMaker target: a CreateTrainingJob request (render.py, pure), sent with boto3 (engine.py)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ...errors import JobError
from ...spec.job_spec import JobSpec
from ..base import Rendered, Target
from .options import SageMakerOptions
from .render import render
from .section import SageMakerSection

if TYPE_CHECKING:
    from ...runs.state import RunRef
    from ..engine_contract import Engine


class SageMakerTarget(Target[SageMakerOptions]):
    name = "sagemaker"
    section = SageMakerSection
    options = SageMakerOptions

    def render(self, job: JobSpec) -> Rendered:
        return render(job)

    def engine(self) -> ModuleType:
        from . import engine

        return engine

    def engine_for(self, run: RunRef) -> Engine:
        """A `local=true` run's engine is local_engine.py (containers here), picked once here; else AWS's."""
        from .handle import SageMakerHandle

        if SageMakerHandle.of(run).local:
            from . import local_engine

            engine: Engine = local_engine
            return engine
        return super().engine_for(run)

    def search_engine(self) -> ModuleType:
        from . import tuning_engine

        return tuning_engine

    def parse_options(self, **options: Any) -> SageMakerOptions:
        parsed = super().parse_options(**options)
        if parsed.local and parsed.via != "direct":
            raise JobError(
                [f"submit option via: got {parsed.via!r} with local=true; local mode runs the rendered request "
                 "itself, so via must be 'direct' (leave it out)"],
                "sagemaker submit options",
            )  # fmt: skip
        return parsed

    def render_for(self, job: JobSpec, options: SageMakerOptions) -> Rendered:
        return render(job, local=options.local)

    def check_inputs(self, job: JobSpec, options: SageMakerOptions) -> list[str]:
        """Local mode's data on this machine (a path or file://): it must be here."""
        if not options.local:
            return []
        from .request import file_channel

        problems = []
        for name, uri in sorted(job.data.items()):
            if not uri.startswith("s3://"):
                path = file_channel(job, name, uri)["DataSource"]["FileDataSource"]["FileUri"].removeprefix("file://")
                if not Path(path).exists():
                    problems.append(f"data.{name}: {path} does not exist (local mode copies it into the channel)")
        return problems

    def schedule(self, job: JobSpec, options: SageMakerOptions) -> RunRef:
        return self.engine().submit(
            job, via=options.via, now=options.now, boto_session=options.boto_session, local=options.local
        )

    def schedule_resumed(self, job: JobSpec, options: SageMakerOptions, files: Path, subdir: str) -> tuple[RunRef, str]:
        """The checkpoint uploaded under a prefix of the new training job's own (SageMaker syncs it into
        /opt/ml/checkpoints before the trainer starts), then the job created. Without a user-set prefix that
        is `<output>/<job name>-resumed-<8 hex>/checkpoints/`: the training job's name is chosen only as it
        is created (by the SageMaker SDK, via model_trainer), so the resumed run's prefix is named apart."""
        import secrets

        from .aws_calls import upload_checkpoint
        from .request import checkpoint_uri, section

        sec = section(job)
        if not (sec.checkpoint_s3_uri or job.checkpoint.dir):
            own = checkpoint_uri(job, f"{job.name}-resumed-{secrets.token_hex(4)}")
            job = job.model_copy(update={"sagemaker": sec.model_copy(update={"checkpoint_s3_uri": own})})
        placed = upload_checkpoint(job, files, subdir, options.boto_session)
        return self.schedule(job, options), placed


TARGET = SageMakerTarget()
