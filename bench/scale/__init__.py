"""Benchmark `scale`: the SDK and the control paths at size.

- sdk.py: 1,000-job renders for every target, `trainctl list` over 10,000 and 100,000 runs;
- writers.py: 8 concurrent `trainctl submit` processes, no record lost;
- slurm_size.py: a 1,024-node hostlist and a retry excluding 100 nodes, checked by scontrol;
- ranks.py + control.py: 8 to 1,024 (and more) stand-in ranks running the trainer's real hang
  watchdog against a TCPStore hosted as torchrun's agent hosts it (docs/scale.md).
"""

from __future__ import annotations

from ..common import Figure
from .control import run_ranks
from .sdk import run_list, run_render
from .slurm_size import run_slurm
from .writers import run_writers


def run(quick: bool = False) -> list[Figure]:
    return run_render(quick) + run_list(quick) + run_writers(quick) + run_slurm(quick) + run_ranks(quick)


__all__ = ["run", "run_render"]
