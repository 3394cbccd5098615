"""A run as HTML for a notebook (`Run._repr_html_`): its state, a progress bar, its last metrics, and where its
checkpoints and log are. Pure: it formats a status and a summary someone already read; every value escaped."""

from __future__ import annotations

from html import escape
from typing import Any

from .progress import describe
from .records import tail_heading
from .state import RunRef, RunStatus

_COLORS = {
    "succeeded": "#1a7f37",
    "failed": "#cf222e",
    "cancelled": "#9a6700",
    "running": "#0969da",
    "queued": "#6e7781",
}


def _row(name: str, value: Any) -> str:
    return f"<tr><th style='text-align:left;padding-right:1em'>{escape(name)}</th><td>{escape(str(value))}</td></tr>"


def run_html(run: RunRef, status: RunStatus, summary: dict[str, Any] | None) -> str:
    state = status.state.value
    head = (
        f"<b>{escape(run.id)}</b> <span style='color:{_COLORS.get(state, '#000')};font-weight:bold'>{escape(state)}</span>"
        + (f" ({escape(status.native_state)})" if status.native_state and status.native_state != state else "")
    )
    rows = [_row("job", run.job_name)] if run.job_name else []
    if status.reason:
        rows.append(_row("reason", status.reason))
    if status.failure is not None and status.failure.kind == "error" and status.log_tail:
        tail = escape("\n".join(status.log_tail))
        rows.append(f"<tr><th style='text-align:left;vertical-align:top'>{escape(tail_heading(status.failure))}</th>"
                    f"<td><pre style='margin:0'>{tail}</pre></td></tr>")  # fmt: skip
    bar = ""
    found = status.progress
    if found is not None and found.step is not None:
        if found.total_steps:
            bar = f"<progress value='{found.step}' max='{found.total_steps}' style='width:24em'></progress> "
        rows.append(
            f"<tr><th style='text-align:left'>progress</th><td>{bar}{escape(describe(found, status.state.finished))}</td></tr>"
        )
    for key in ("final_loss", "val_loss", "val_accuracy"):
        if summary and summary.get(key) is not None:
            rows.append(_row(key, f"{summary[key]:.4g}" if isinstance(summary[key], float) else summary[key]))
    paths = run.paths
    for name, where in (
        ("checkpoints", paths.checkpoint_dir),
        ("output", paths.output_dir),
        ("log", status.log or paths.log),
    ):
        if where:
            rows.append(_row(name, where))
    return f"<div class='trainctl-run'>{head}<table>{''.join(rows)}</table></div>"
