"""Expand SLURM hostlist syntax in pure Python, so the launcher needs no `scontrol`.

`node[01-03,7],gpu-a[1-2]` -> node01 node02 node03 node7 gpu-a1 gpu-a2; several bracket
groups in one name (`r[1-2]-n[1-2]`) expand as a product, in SLURM's order.
"""

from __future__ import annotations

import itertools
import re

from ..errors import TrainerInputError

_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise TrainerInputError(f"hostlist {text!r}: unbalanced ']' at position {i}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise TrainerInputError(f"hostlist {text!r}: unbalanced '['")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_range(spec: str, whole: str) -> list[str]:
    """`01-03,7` -> ['01', '02', '03', '7'], keeping the zero padding of the low bound."""
    out: list[str] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        if "-" in item:
            lo, hi = item.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise TrainerInputError(f"hostlist {whole!r}: bad range {item!r}")
            width = len(lo) if lo.startswith("0") else 0
            out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
        elif item.isdigit():
            out.append(item)
        else:
            raise TrainerInputError(f"hostlist {whole!r}: bad range item {item!r}")
    return out


def expand_hostlist(text: str) -> list[str]:
    """All host names of a SLURM hostlist expression, in order, without duplicates removed."""
    hosts: list[str] = []
    for part in _split_top_level(text):
        pieces = _BRACKET.split(part)  # literal, range, literal, range, ..., literal
        choices: list[list[str]] = []
        for i, piece in enumerate(pieces):
            choices.append(_expand_range(piece, text) if i % 2 else [piece])
        hosts.extend("".join(combo) for combo in itertools.product(*choices))
    return hosts
