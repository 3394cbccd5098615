"""The results as a Markdown table, printed and written into docs/benchmarks.md between markers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import ROOT
from .drift import DOWN, INSIDE, UP, summary

DOCS = ROOT / "docs" / "benchmarks.md"


def markers(name: str) -> tuple[str, str]:
    """The comments a generated table sits between: `table` (the CPU figures), `gpu` (bench/gpu.py's)."""
    return f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"


BEGIN, END = markers("table")


def _num(value: float | None) -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) >= 0.01 else f"{value:.2g}"


def reading(fig: dict[str, Any]) -> str:
    """One line: meets/misses the target, or why there is no number; whether it moved; the figure's own note."""
    note = fig.get("note") or ""
    if fig["median"] is None:
        return note
    if fig["meets"] is True:
        head = "meets the target"
    elif fig["meets"] is False:
        head = "**misses the target** (see below)"
    else:
        head = ""
    drift = fig.get("drift")
    moved = f"**moved {drift}** beyond the previous run's band" if drift in (UP, DOWN) else ""
    return "; ".join(x for x in (head, moved, note) if x)


def previous_cell(fig: dict[str, Any]) -> str:
    """The previous run's median and band, marked when this run's median left it."""
    old = fig.get("previous")
    if not old:
        return "-"
    cell = f"{_num(old['median'])} ({_num(old['min'])}-{_num(old['max'])})"
    return cell if fig.get("drift") == INSIDE else f"{cell} {fig.get('drift') or ''}".rstrip()


def markdown_table(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [
        f"Run {meta['started_utc']}, {meta['duration_s']} s, {meta['cpus']} CPUs, Python {meta['python']}, "
        f"torch {meta['torch']}, "
        + (f"device {meta['device']}, " if meta.get("device") else "")
        + f"commit {meta['git_commit']}; 1-minute load average "
        f"{meta['load_avg_1min_start']} at the start, {meta['load_avg_1min_end']} at the end"
        + (" (quick mode: few repetitions, small sizes)" if meta["quick"] else "")
        + ".",
        "",
        "| benchmark | figure | median | min | max | unit | target | reps | previous run (band) | reading |",
        "|---|---|---:|---:|---:|---|---|---:|---|---|",
    ]
    for f in results["figures"]:
        target = (f["target"] or "").replace("<", "&lt;").replace(">", "&gt;") or "-"
        lines.append(
            f"| {f['benchmark']} | {f['name']} | {_num(f['median'])} | {_num(f['min'])} | {_num(f['max'])} "
            f"| {f['unit']} | {target} | {f['reps']} | {previous_cell(f)} | {reading(f)} |"
        )
    lines.append("\n" + summary(results["figures"]))
    broken = {k: v for k, v in results["benchmarks"].items() if v["status"] != "ok"}
    for name, info in broken.items():
        lines.append(f"\nBenchmark `{name}` failed: {info['error']}")
    return "\n".join(lines) + "\n"


def update_docs(path: Path, results: dict[str, Any], marker: str = "table") -> None:
    """Replace the generated table between the `marker` comments (`markers`), adding them at the end if missing."""
    begin, end = markers(marker)
    text = path.read_text() if path.is_file() else "# Benchmarks\n\n"
    block = f"{begin}\n{markdown_table(results)}{end}"
    if begin in text and end in text:
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
