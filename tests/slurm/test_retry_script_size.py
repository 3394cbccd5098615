"""The retrying batch script stays one script a cluster admin reads top to bottom (issue 37 section 4: it was
486 lines, then 151-190, then 105-150): under 120 lines for a job with `retries` or `slurm.preemption` in every
runtime (podman's per-node image check and user block included) and in every retrying golden (llm-pyxis's
secrets included), and the retry lines themselves (the script with them minus the same job without) within
RETRY_LINES everywhere, so a job whose own lines are many grows by no more than that."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainctl import Job

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "slurm"
BUDGET = 120
RETRY_LINES = 75
RETRYING = {"retries=2": ["retries=2"], "preemption": ["slurm.preemption=true"],
            "both": ["retries=2", "slurm.preemption=true"]}  # fmt: skip
RUNTIMES = ["none", "pyxis", "apptainer", "podman"]


def lines(job: Job) -> int:
    return len(job.render("slurm").text.splitlines())


def without_retries(job: Job) -> Job:
    return job.with_overrides(["retries=0", "slurm.preemption=false"])


def digits(runtime: str, retrying: list[str]) -> Job:
    """examples/digits.yaml on 2 nodes, as the README renders it, in `runtime`."""
    return Job.from_yaml(ROOT / "examples" / "digits.yaml").with_overrides(
        ["resources.nodes=2", f"slurm.container={runtime}", "slurm.workdir=/shared/w",
         "image=ghcr.io/trainctl/trainer:0.1.0", *retrying]
    )  # fmt: skip


def golden(case: str) -> Job:
    return Job.from_yaml_text((GOLDEN / f"{case}.job.yaml").read_text(), f"{case}.job.yaml")


RETRY_GOLDENS = sorted(
    p.name.removesuffix(".job.yaml")
    for p in GOLDEN.glob("*.job.yaml")
    if "why_not_retried" in (GOLDEN / p.name.replace(".job.yaml", ".sh")).read_text()
)


def test_the_goldens_with_retries_are_the_four_runtimes_cases() -> None:
    assert set(RETRY_GOLDENS) == {"custom-apptainer", "llm-pyxis", "srun-apptainer-gres", "srun-pyxis"}


@pytest.mark.parametrize("retrying", RETRYING.values(), ids=list(RETRYING))
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_retrying_script_is_under_the_budget(runtime: str, retrying: list[str]) -> None:
    assert lines(digits(runtime, retrying)) < BUDGET


@pytest.mark.parametrize("case", RETRY_GOLDENS)
def test_the_retrying_goldens_are_under_the_budget(case: str) -> None:
    assert len((GOLDEN / f"{case}.sh").read_text().splitlines()) < BUDGET


@pytest.mark.parametrize("retrying", RETRYING.values(), ids=list(RETRYING))
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_retry_lines_are_few_in_every_runtime(runtime: str, retrying: list[str]) -> None:
    job = digits(runtime, retrying)
    assert lines(job) - lines(without_retries(job)) <= RETRY_LINES


@pytest.mark.parametrize("case", RETRY_GOLDENS)
def test_the_retry_lines_of_every_golden_are_few(case: str) -> None:
    job = golden(case)
    assert lines(job) - lines(without_retries(job)) <= RETRY_LINES
