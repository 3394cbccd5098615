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
