"""A real notebook, executed by nbclient on a real IPython kernel: submit the digits job, follow its log, show
the run (its HTML display) and plot it. The followed log carries every line once (kubeflow/sdk#435 printed
each line twice: the SDK's own print inside logs(follow=True), then the caller's, and only once the job had
ended), in order, as the run writes them."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")


def _cells(job_file: Path) -> list[str]:
    return [
        "from trainctl import Job\n"
        f"job = Job.from_yaml({str(job_file)!r}).with_overrides(['trainer.epochs=2'])\n"
        "run = job.submit(target='local')\n"
        "run.id",
        "import time\nstamps = []\nfor line in run.logs(follow=True):\n    print(line)\n    stamps.append(time.time())",
        "run.wait(timeout=300)\nrun",
        "run.plot()",
        "stamps[-1] - stamps[0]",
    ]


def _text(output: dict[str, Any]) -> str:
    return str(output.get("text", "")) if output.get("output_type") == "stream" else ""


def test_a_notebook_submits_follows_shows_and_plots(digits_job_file: Path, tmp_path: Path) -> None:
    from trainctl import Run

    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in _cells(digits_job_file)])
    nbclient.NotebookClient(
        book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    run_id = book.cells[0].outputs[0]["data"]["text/plain"].strip("'")
    run = Run.from_id(run_id)

    followed = "".join(_text(o) for o in book.cells[1].outputs).splitlines()
    logged = list(run.logs())
    assert followed == logged, (len(followed), len(logged))  # every line once, none missing, in order
    assert any("trainctl progress: step=" in line for line in followed)
    spread = float(book.cells[4].outputs[0]["data"]["text/plain"])
    assert spread > 2, f"the lines arrived within {spread:.2f} s: not streamed while the run trained"

    html = book.cells[2].outputs[0]["data"]["text/html"]
    assert run_id in html and "succeeded" in html and "<progress value=" in html, html
    assert str(run.paths.checkpoint_dir) in html and "val_accuracy" in html and "(100 %)" in html, html

    png = [o for o in book.cells[3].outputs if "image/png" in o.get("data", {})]
    assert png and base64.b64decode(png[0]["data"]["image/png"])[:8] == b"\x89PNG\r\n\x1a\n", book.cells[3].outputs
