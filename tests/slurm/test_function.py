"""A notebook's function on the real SLURM cluster: DDP with gloo across 2 nodes (one process each), its value
and its error come back from the shared workdir (tests/sdk/test_function_notebook.py is the notebook)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
notebook = pytest.importorskip("function_notebook")  # tests/support: needs nbclient and nbformat


def test_a_notebook_function_runs_ddp_on_two_slurm_nodes(cluster: object, tmp_path: Path, home: Path) -> None:
    fields = (
        "resources={'nodes': 2, 'procs_per_node': 1}, "
        f"slurm={{'python_env': {sys.prefix!r}, 'workdir': {str(tmp_path / 'runs')!r}}}"
    )
    notebook.check_came_back(notebook.run_notebook(tmp_path, "slurm", fields))


def test_map_runs_as_one_slurm_array_and_returns_results_in_input_order(
    cluster: object, tmp_path: Path, home: Path
) -> None:
    import cloudpickle
    from trainctl import Job

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test module does not travel: by value
    slurm = {"python_env": sys.prefix, "workdir": str(tmp_path / "runs")}
    mapped = (
        Job(name="fn-map", slurm=slurm)
        .with_function(scaled, 10)
        .map([{"x": 1}, {"x": 2}, {"x": 3}], "slurm", parallel=2)
    )
    assert mapped.results(timeout=240) == [11, 12, 13]
    assert mapped.sweep.record.engine_id is not None  # one array job ran them all
    assert [run.native_id for run in mapped.runs() if run] == [f"{mapped.sweep.record.engine_id}_{i}" for i in range(3)]


def scaled(base: int, x: int) -> int:
    return base + x
