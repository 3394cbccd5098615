"""A real Jupyter kernel, driven by nbclient, defines an import, a helper and a constant in their own cells, then a
training function that uses them; `Job.with_function` ships it by value and it runs DDP with gloo across 2
processes on the local target; its value comes back, and a function that raises comes back as its own exception
with the function's frame in the remote traceback (the notebook: tests/support/function_notebook.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
notebook = pytest.importorskip("function_notebook")  # tests/support: needs nbclient and nbformat


def test_a_notebook_function_runs_ddp_on_local_and_its_value_and_error_come_back(tmp_path: Path) -> None:
    notebook.check_came_back(notebook.run_notebook(tmp_path, "local", "resources={'procs_per_node': 2}"))
