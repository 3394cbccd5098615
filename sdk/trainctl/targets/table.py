"""THE table of targets: one row per target. Everything else derives from it.

The job's target sections, `Job.section`, run ids, the CLI's `--target` help and the columns of
`trainctl list` read their names from here; `targets.lookup.get_target` loads the row's `module`
(which defines `TARGET`, an instance of `targets.base.Target`) on first use, so an unused target
costs nothing. Pure data: importing this loads nothing else (`trainctl list` and `--help` stay fast).
Adding a target: one row here, one `targets/<name>/` package, one section field on the job
(docs/architecture.md walks through it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TargetRow:
    """A target's name, where its `TARGET` lives, and what its render produces (for help and docs)."""

    name: str
    module: str
    artifact: str


TABLE: tuple[TargetRow, ...] = (
    TargetRow("local", "trainctl.targets.local.target", "launcher argv + environment, as an sh script"),
    TargetRow("slurm", "trainctl.targets.slurm.target", "sbatch script"),
    TargetRow("kubernetes", "trainctl.targets.kubernetes.target", "Kubeflow PyTorchJob manifest"),
    TargetRow("sagemaker", "trainctl.targets.sagemaker.target", "CreateTrainingJob request (JSON)"),
)

NAMES: tuple[str, ...] = tuple(row.name for row in TABLE)
ROWS: dict[str, TargetRow] = {row.name: row for row in TABLE}


def names_text() -> str:
    """`local, slurm, kubernetes or sagemaker`, for help and error messages."""
    return ", ".join(NAMES[:-1]) + f" or {NAMES[-1]}"
