"""A run's metrics as rows, joined along its lineage, and shown: a table, CSV, JSON or a matplotlib figure.

Rows come from the trainer's `metrics.jsonl` where a target can read its output folder (`{"kind": "train",
"step", "epoch", "loss", "lr", "samples_per_s", ...}` and `{"kind": "eval", "step", "epoch", "val_loss",
"val_accuracy"}`), else from the run's log: the progress lines (docs/contracts.md "Progress") as train rows
and the trainer's `epoch N: {...}` lines as eval rows, at the step of the progress line before them.
A run resumed from another (`--resume-from`, its lineage in the run record) is one curve: the source's rows
up to the step the new run started from, then the new run's (`along_lineage`). matplotlib (the `plot`
extra) is imported only when a figure is drawn.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .progress import from_line

COLUMNS = ("run", "kind", "step", "epoch", "loss", "val_loss", "val_accuracy", "lr", "samples_per_s")
_EVAL_LINE = re.compile(r"\bepoch (\d+): (\{.*\})\s*$")


def from_jsonl(text: str) -> list[dict[str, Any]]:
    """metrics.jsonl's rows (a line cut short by a running writer is skipped)."""
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows.append(row)
    return rows


def from_log(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Rows from a log where no metrics.jsonl can be read (a pod's log, CloudWatch)."""
    rows: list[dict[str, Any]] = []
    step = 0
    for line in lines:
        found = from_line(line)
        if found is not None and found.step is not None:
            step = found.step
            fields = found.model_dump(include={"step", "epoch", "loss", "samples_per_s"}, exclude_none=True)
            rows.append({"kind": "train", **fields})
            continue
        evaluated = _EVAL_LINE.search(line)
        if evaluated is not None:
            try:
                values = json.loads(evaluated[2])
            except ValueError:
                continue
            if isinstance(values, dict):
                rows.append({"kind": "eval", "step": step, "epoch": int(evaluated[1]), **values})
    return rows


def along_lineage(chain: Sequence[tuple[str, list[dict[str, Any]], int | None]]) -> list[dict[str, Any]]:
    """One curve from a chain of runs, oldest first: (run id, its rows, the step the *next* run resumed from).
    Each run's rows after that step are dropped (the next run trained them again); every row names its run."""
    joined: list[dict[str, Any]] = []
    for run_id, rows, resumed_at in chain:
        joined += [{"run": run_id, **r} for r in rows if resumed_at is None or r.get("step", 0) <= resumed_at]
    return joined


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    return str(value)


def table(rows: Sequence[dict[str, Any]]) -> str:
    """Aligned text, one row per line, the columns that have any value. Train and eval rows only, as the trackers
    log them (a `stragglers` verdict has none of these columns: a line of blanks); json and csv keep every row."""
    rows = [r for r in rows if r.get("kind", "train") in ("train", "eval")]
    columns = [c for c in COLUMNS if any(r.get(c) is not None for r in rows)]
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines) + "\n"


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """CSV with the table's columns first, then every other key any row has."""
    keys = [c for c in COLUMNS if any(c in r for r in rows)]
    keys += sorted({k for r in rows for k in r} - set(keys))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def plot(curves: dict[str, list[dict[str, Any]]], path: Path | str | None = None) -> Any:
    """A figure: train loss against step (left), validation loss and accuracy against step (right), one line
    per curve; saved to `path` when given. Returns the matplotlib Figure."""
    try:
        import matplotlib

        if path is not None:
            matplotlib.use("Agg")  # a file needs no display (a notebook keeps its own backend)
        from matplotlib.figure import Figure
    except ImportError:
        from ..errors import JobError

        raise JobError(["plotting needs matplotlib: pip install 'trainctl[plot]'"]) from None

    class CurvesFigure(Figure):
        """Shows itself in Jupyter as a PNG without pyplot (a pyplot figure would also be drawn at the
        cell's end: the same plot twice)."""

        def _repr_png_(self) -> bytes:
            out = io.BytesIO()
            self.savefig(out, format="png", dpi=90)
            return out.getvalue()

    figure = CurvesFigure(figsize=(11, 4), layout="constrained")
    loss_ax, val_ax = figure.subplots(1, 2)
    acc_ax = val_ax.twinx()
    for index, (label, rows) in enumerate(curves.items()):
        color = f"C{index}"
        train = [
            (r["step"], r["loss"]) for r in rows if r.get("kind", "train") == "train" and r.get("loss") is not None
        ]
        evals = [r for r in rows if r.get("kind") == "eval"]
        if train:
            loss_ax.plot(*zip(*train, strict=True), color=color, label=label)
        for key, ax, style in (("val_loss", val_ax, "-o"), ("val_accuracy", acc_ax, "--s")):
            points = [(r["step"], r[key]) for r in evals if r.get(key) is not None]
            if points:
                ax.plot(*zip(*points, strict=True), style, color=color, markersize=3, label=f"{label} {key}")
    loss_ax.set(title="train loss", xlabel="step", ylabel="loss")
    loss_ax.set_yscale("log")
    val_ax.set(title="validation", xlabel="step", ylabel="val_loss (solid)")
    acc_ax.set_ylabel("val_accuracy (dashed)")
    if curves:
        loss_ax.legend(fontsize="small")
    if path is not None:
        figure.savefig(path, dpi=110)
    return figure
