"""What the trainer and the launcher leave in a run's output folder about how it went wrong, as the
SDK reads it (docs/contracts.md section 2; the trainer writes them, trainer/records.py).

    failure.json     the verdict that ended an attempt: kind `hang` or `slow_node`, the step, and the
                     suspects (node, rank, heartbeat age, why)
    slow_nodes.json  every node the straggler check flagged, with its rank and ratio

Data only: each target's engine reads the files where it can reach them and hands the parsed JSON
here, so `trainctl status` shows them the same way on every target (`slow_nodes`, `failure`).
"""

from __future__ import annotations

from typing import Any

FAILURE = "failure.json"
SLOW_NODES = "slow_nodes.json"


def slow_nodes(data: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The flagged nodes of a slow_nodes.json, slowest first: node, rank, ratio, steps."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        return []
    keep = ("node", "rank", "ratio", "max_ratio", "compute_ms", "median_ms", "first_step", "last_step")
    nodes = [{k: n[k] for k in keep if k in n} for n in data["nodes"] if isinstance(n, dict) and "node" in n]
    return sorted(nodes, key=lambda n: -float(n.get("ratio") or 0))


def failure(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """The part of a failure.json that status shows: kind, source, step, exit code, suspects."""
    if not isinstance(data, dict) or "kind" not in data:
        return None
    keep = ("kind", "source", "step", "exit_code", "time_utc", "suspects")
    return {k: data[k] for k in keep if k in data}


def slow_node_line(node: dict[str, Any]) -> str:
    """`n2 (rank 1): 4.83x the median compute time (steps 21-60)`, for the text status."""
    steps = f" (steps {node['first_step']}-{node['last_step']})" if "first_step" in node and "last_step" in node else ""
    return f"{node['node']} (rank {node.get('rank')}): {node.get('ratio')}x the median compute time{steps}"


def failure_line(record: dict[str, Any]) -> str:
    """`hang at step 57: suspect n2 rank 1 (no heartbeat for 11 s ...)`, for the text status."""
    step = f" at step {record['step']}" if record.get("step") is not None else ""
    suspects = record.get("suspects") or []
    named = "; ".join(f"suspect {s.get('node')} rank {s.get('rank')} ({s.get('why')})" for s in suspects)
    return f"{record['kind']}{step}: {named or 'no suspect named'}"
