"""The notebook every target's function test runs (tests/sdk/test_function_notebook.py, tests/slurm, ...): cells
that define an import, a helper and a constant, then a training function that uses them (DDP with gloo), and a
function that raises; a real Jupyter kernel runs them through nbclient, submits both, and prints what came back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbclient
import nbformat

CELLS = [
    "import torch",
    "def helper(x):\n    return x * SCALE",
    "SCALE = 3",
    "def train(steps, lr=0.1):\n"
    "    import torch.distributed as dist\n"
    "    dist.init_process_group('gloo')\n"
    "    torch.manual_seed(0)\n"
    "    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))\n"
    "    opt = torch.optim.SGD(model.parameters(), lr=lr)\n"
    "    for _ in range(steps):\n"
    "        x = torch.full((4, 1), float(dist.get_rank() + 1))\n"
    "        loss = (model(x) - 1).pow(2).mean()\n"
    "        opt.zero_grad(); loss.backward(); opt.step()\n"
    "    total = torch.tensor([float(dist.get_rank() + 1)])\n"
    "    dist.all_reduce(total)\n"
    "    out = {'rank': dist.get_rank(), 'world': dist.get_world_size(), 'scaled': helper(total.item()),\n"
    "           'weight': [round(p.item(), 6) for p in model.parameters()]}\n"
    "    dist.destroy_process_group()\n"
    "    return out",
    "def broken():\n    raise ValueError(f'bad scale {SCALE}')",
]


def _submit_cells(target: str, fields: str, options: str) -> list[str]:
    """Submit both functions and print their run ids; then (a cell of its own, so that a test can drive the
    engine between them) print what came back as JSON."""
    submit = f"submit(target={target!r}{options})"
    return [
        "import json, traceback\nfrom trainctl import Job\n"
        f"job = Job(name='nb-fn', {fields})\n"
        f"run = job.with_function(train, 3, lr=0.05).{submit}\n"
        f"bad = job.with_function(broken).{submit}\n"
        "print(json.dumps([run.id, bad.id]))",
        "values = run.results(timeout=300)\n"
        "try:\n"
        "    bad.result(timeout=300)\n"
        "except ValueError as exc:\n"
        "    caught = {'type': type(exc).__name__, 'message': str(exc), 'remote': exc.remote_traceback,\n"
        "              'chain': ''.join(traceback.format_exception(exc))}\n"
        "print(json.dumps({'values': values, 'caught': caught, 'render': job.with_function(train, 3).render("
        f"{target!r}).notes[-1]}}))",
    ]


def _printed(cell: Any) -> Any:
    text = "".join(str(o.get("text", "")) for o in cell.outputs if o.get("output_type") == "stream")
    return json.loads(text.strip().splitlines()[-1])


def run_notebook(
    tmp_path: Path, target: str, fields: str, options: str = "", between: Callable[[list[str]], None] | None = None
) -> dict[str, object]:
    """Execute the notebook in a fresh kernel (`fields`: the Job's, `options`: submit's, as Python text); `between`
    gets the two run ids after the submit cell (a test that must drive the engine); what the last cell printed."""
    cells = [*CELLS, *_submit_cells(target, fields, options)]
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(
        book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    with client.setup_kernel():
        for index, cell in enumerate(book.cells):
            client.execute_cell(cell, index)
            if index == len(book.cells) - 2 and between is not None:
                between(_printed(cell))
    found = _printed(book.cells[-1])
    assert isinstance(found, dict)
    return found


def check_came_back(found: dict[str, object]) -> None:
    """Both ranks' values (the helper and constant from other cells used remotely; DDP kept the weights equal),
    the raised error as its own type with the function's frame, and what render said was shipped."""
    values = found["values"]
    assert isinstance(values, list) and [v["rank"] for v in values] == [0, 1], values
    assert all(v["world"] == 2 and v["scaled"] == 9.0 for v in values), values
    assert values[0]["weight"] == values[1]["weight"], values  # gradients were all-reduced: one model
    caught = found["caught"]
    assert isinstance(caught, dict) and caught["type"] == "ValueError" and caught["message"] == "bad scale 3"
    assert 'File "<dynamic-code>", line 2, in broken\n' in caught["remote"], caught["remote"]  # cloudpickle's name
    assert "remote traceback (the function's own frames)" in caught["chain"], caught["chain"]
    render = str(found["render"])
    assert render.startswith("function: __main__.train (") and "modules bound by reference: torch" in render
