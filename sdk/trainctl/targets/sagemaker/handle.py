"""What a SageMaker run records to be found again: its region, how it was created, and for `local=true`
the containers on this machine that stand in for its hosts."""

from __future__ import annotations

from pydantic import Field

from ...runs.state import TargetHandle


class SageMakerHandle(TargetHandle):
    """A training job on AWS (region, bridge, log group), or a `-O local=true` run here (local_engine.py),
    whose folder is the record's `paths.run_dir`."""

    region: str | None = None
    via: str | None = Field(None, description="direct, estimator or model_trainer: what created the job.")
    log_group: str | None = None
    local: bool = False
    pid: int | None = Field(None, description="local=true: the runner process.")
    runtime: str | None = None
    image: str | None = None
    image_id: str | None = None
    image_ids: dict[str, str] = Field(default_factory=dict)
    containers: dict[str, str] = Field(default_factory=dict, description="local=true: {host: container name}.")
    network: str | None = None
