"""The job's `tracking:` section (MLflow, W&B) and the variables that join every process to its one tracker run.

Pure: the section, the ids fixed at submit (`TrackerRun`), and the environment each target exports. The
variables are the ones each tracker's own client reads, so a `command:` job's `mlflow.start_run()` or
`wandb.init()` joins the same run with no argument:
- MLflow (mlflow/environment_variables.py): `MLFLOW_TRACKING_URI`, `MLFLOW_EXPERIMENT_NAME`,
  `MLFLOW_EXPERIMENT_ID`, and `MLFLOW_RUN_ID`, which `mlflow.start_run()` resumes (mlflow/tracking/fluent.py,
  `start_run`: `elif run_id := MLFLOW_RUN_ID.get()`, mlflow 3.17).
- W&B (wandb/sdk/wandb_settings.py, docs "Environment variables"): `WANDB_PROJECT`, `WANDB_ENTITY`,
  `WANDB_MODE`, `WANDB_RUN_ID` (the run's `id`) and `WANDB_RESUME=allow` (resume the id if it exists,
  else create it: every attempt, retry and `--resume-from` logs into the one run).
API keys (`MLFLOW_TRACKING_TOKEN`, `WANDB_API_KEY`) are never here: they come through `secrets:` only (`Secret`).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .section import Section

SECRET_VARIABLES = frozenset(
    {"MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_USERNAME", "WANDB_API_KEY"}
)
"""The trackers' credentials: a job passes them through `secrets:`, never `env:` (written down, rendered)."""
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Secret(Section):
    """A secret resolved on the target at run time; only its name is ever written down."""

    env: str = Field(..., description="Environment variable the value arrives in.")
    name: str = Field(..., description="The secret's name in the target's store (K8s Secret, AWS secret id, file).")
    key: str | None = Field(None, description="Key inside the secret, where the store has keys.")

    @field_validator("env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not ENV_NAME.match(value):
            raise ValueError("expected an environment variable name: letters, digits, _ (not first a digit)")
        return value

    @field_validator("name")
    @classmethod
    def _secret_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/+=@:-]{0,511}", value):
            raise ValueError("expected a secret name: letters, digits and ._/+=@:- (no spaces or quotes)")
        return value


class MlflowTracking(Section):
    """An MLflow tracking server: trainctl creates the run at submit and every attempt logs into it."""

    tracking_uri: str = Field(..., description="The tracking server, http(s)://host:port (its REST API).")
    experiment: str = Field("Default", description="The experiment's name; created at submit if missing.")

    @field_validator("tracking_uri")
    @classmethod
    def _http(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
            raise ValueError("expected an http:// or https:// tracking server address (trainctl uses its REST API)")
        return value.rstrip("/")


class WandbTracking(Section):
    """A Weights & Biases project: one run id, fixed at submit, resumed by every attempt."""

    project: str = Field(..., description="The W&B project.")
    entity: str | None = Field(None, description="The W&B entity (team or user); default: the key's own.")
    mode: Literal["online", "offline", "disabled"] = Field(
        "online", description="offline: the run is written under the output folder, for `wandb sync` later."
    )


class Tracking(Section):
    """Experiment trackers: one tracker run across every attempt, retry and `--resume-from` (docs/tracking.md)."""

    mlflow: MlflowTracking | None = Field(None, description="Log to an MLflow tracking server.")
    wandb: WandbTracking | None = Field(None, description="Log to Weights & Biases.")


class TrackerRun(BaseModel):
    """The ids fixed at submit: W&B takes the same id as MLflow's run (32 hex digits), or one of its own."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    experiment_id: str | None = Field(None, description="MLflow's experiment of the run.")
    group: str | None = Field(None, description="The sweep the run is a trial of: W&B's run group.")


def tracker_env(tracking: Tracking | None, run: TrackerRun | None) -> dict[str, str]:
    """What every process of the job gets: render shows the addresses, a submitted job adds the run's ids."""
    if tracking is None:
        return {}
    env: dict[str, str] = {}
    if tracking.mlflow is not None:
        env["MLFLOW_TRACKING_URI"] = tracking.mlflow.tracking_uri
        env["MLFLOW_EXPERIMENT_NAME"] = tracking.mlflow.experiment
        if run is not None:
            env["MLFLOW_RUN_ID"] = run.run_id
            if run.experiment_id is not None:
                env["MLFLOW_EXPERIMENT_ID"] = run.experiment_id
    if tracking.wandb is not None:
        env["WANDB_PROJECT"] = tracking.wandb.project
        env["WANDB_MODE"] = tracking.wandb.mode
        if tracking.wandb.entity is not None:
            env["WANDB_ENTITY"] = tracking.wandb.entity
        if run is not None:
            env["WANDB_RUN_ID"] = run.run_id
            env["WANDB_RESUME"] = "allow"
            if run.group is not None:  # wandb/env.py RUN_GROUP: a sweep's trials side by side in W&B
                env["WANDB_RUN_GROUP"] = run.group
    return env
