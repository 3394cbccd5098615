"""The sweep's search space (spec/sweep.py) and the median rule (sweeps/median.py): pure, no engine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from trainctl.errors import JobError
from trainctl.spec.sweep import EarlyStopping, from_flags, merged, parse, trial_params
from trainctl.sweeps.median import to_stop

TRAINCTL = str(Path(sys.executable).parent / "trainctl")


def test_a_grid_runs_every_combination_in_the_order_written() -> None:
    spec = from_flags(None, ["trainer.lr=1e-3,3e-3", "trainer.batch_size=32,64"], [], parallel=2)
    assert spec.chosen_strategy == "grid" and spec.size == 4 and spec.parallel == 2
    assert trial_params(spec) == [
        {"trainer.lr": 0.001, "trainer.batch_size": 32},
        {"trainer.lr": 0.001, "trainer.batch_size": 64},
        {"trainer.lr": 0.003, "trainer.batch_size": 32},
        {"trainer.lr": 0.003, "trainer.batch_size": 64},
    ]


def test_random_search_is_seeded_and_stays_in_its_range() -> None:
    spec = from_flags(None, ["trainer.batch_size=16,32"], ["trainer.lr=loguniform(1e-4,1e-2)"], trials=8)
    with pytest.raises(ValueError, match="seed"):
        trial_params(spec)  # never an unrecorded seed
    first, again, other = (trial_params(spec.seeded(s)) for s in (7, 7, 8))
    assert first == again != other and len(first) == 16
    assert all(1e-4 <= t["trainer.lr"] <= 1e-2 for t in first)  # type: ignore[operator]
    assert spec.seeded(7).seeded(9).seed == 7  # a seed the spec names is kept


@pytest.mark.parametrize(
    ("grid", "random", "named"),
    [
        ([], ["trainer.lr=logunifrom(1e-4,1e-2)"], "unknown distribution 'logunifrom'"),
        ([], ["trainer.lr=loguniform(0,1e-2)"], "low must be above 0"),
        ([], ["trainer.lr=uniform(3)"], "expected two numbers"),
        ([], ["trainer.lr=loguniform(1e-2,1e-4)"], "low must be below high"),
        (["trainer.lr"], [], "--grid 'trainer.lr': expected field.path=value1,value2"),
        (["lr=1,2"], [], "'lr' is not a field path"),
    ],
)
def test_a_broken_expression_names_the_bad_part(grid: list[str], random: list[str], named: str) -> None:
    with pytest.raises(JobError, match=named.replace("(", r"\(").replace(")", r"\)")):
        from_flags(None, grid, random)


def test_the_section_is_checked_where_it_is_written() -> None:
    with pytest.raises(JobError, match=r"sweep.paralel: unknown field"):
        parse({"grid": {"trainer.lr": [1]}, "paralel": 2})
    with pytest.raises(JobError, match="trials counts random draws"):
        merged(None, grid={"trainer.lr": [1e-3]}, trials=3)
    with pytest.raises(JobError, match="a sweep needs a search space"):
        merged(None, parallel=2)


def test_a_bayesian_sweep_counts_its_training_jobs_in_trials() -> None:
    with pytest.raises(JobError, match="strategy bayesian needs trials"):
        merged(None, strategy="bayesian", random={"trainer.lr": "loguniform(1e-4,1e-2)"})
    spec = merged(None, strategy="bayesian", grid={"trainer.batch_size": [32, 64]}, trials=5)
    assert spec.size == 5  # SageMaker's search picks 5 points; a grid is one categorical range of it


def test_the_median_rule_stops_only_a_trailing_trial_that_has_company_at_its_step() -> None:
    rule = EarlyStopping(after_step=20, min_trials=2)
    found = {
        0: [(10, 0.5), (20, 0.8), (30, 0.9)],  # finished
        1: [(10, 0.4), (20, 0.7), (30, 0.85)],  # finished
        2: [(10, 0.1), (20, 0.2)],  # running, trails at step 20: median of 0.8 and 0.7 is 0.75
        3: [(10, 0.6), (20, 0.9)],  # running, leads
        4: [(10, 0.0)],  # running, before after_step
    }
    stop = to_stop(found, {2, 3, 4}, rule, "val_accuracy", "max")
    assert list(stop) == [2] and "0.2 by step 20 trails the median 0.8" in stop[2]  # 0.7, 0.8, 0.9 -> 0.8
    assert to_stop(found, {2}, EarlyStopping(after_step=20, min_trials=4), "val_accuracy", "max") == {}
    assert list(to_stop({0: [(5, 2.0)], 1: [(5, 1.0)]}, {0, 1}, EarlyStopping(after_step=0, min_trials=1), "loss",
                        "min")) == [0]  # fmt: skip


def test_a_bad_trial_exits_2_naming_it_and_submits_nothing(digits_job_file: Path, trainctl_home: Path) -> None:
    for args, named in [
        (["--grid", "trainer.lr=1e-3,20"], "trial 1 (trainer.lr=20): trainer.lr: got 20"),
        (["--grid", "trainer.lrr=1e-3"], 'trainer.lrr: unknown field (did you mean "lr"?)'),
        (["--random", "trainer.lr=loguniform(1e-4,)"], "expected two numbers"),
        (
            ["--grid", "trainer.lr=1e-3", "--set", "checkpoint.dir=/tmp/shared"],
            "checkpoint.dir=/tmp/shared: every trial",
        ),
    ]:
        proc = subprocess.run([TRAINCTL, "sweep", str(digits_job_file), *args], capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        assert named in " ".join(proc.stderr.split()), proc.stderr
    assert not (trainctl_home / "sweeps").exists() and not (trainctl_home / "runs").exists()
