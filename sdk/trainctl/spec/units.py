"""Parsing the human units a job file uses: durations ("4h", "1h30m", "02:00:00") and memory ("16Gi")."""

from __future__ import annotations

import re

_DURATION_PART = re.compile(r"(\d+)\s*(d|h|m|s)", re.ASCII)  # ASCII: fullwidth digits are not a duration
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti|K|M|G|T|KB|MB|GB|TB)?\s*$", re.ASCII)
_MEMORY_MIB = {
    None: 1 / (1024 * 1024),
    "Ki": 1 / 1024,
    "Mi": 1,
    "Gi": 1024,
    "Ti": 1024 * 1024,
    "K": 1000 / 1024**2,
    "KB": 1000 / 1024**2,
    "M": 1000**2 / 1024**2,
    "MB": 1000**2 / 1024**2,
    "G": 1000**3 / 1024**2,
    "GB": 1000**3 / 1024**2,
    "T": 1000**4 / 1024**2,
    "TB": 1000**4 / 1024**2,
}
DURATION_HELP = 'seconds as a number, "90m", "4h", "1d2h30m" or "HH:MM:SS"'
MEMORY_HELP = 'a size such as "16Gi", "512Mi", "32G" (binary Ki/Mi/Gi/Ti or decimal K/M/G/T)'


def parse_duration(value: str | int) -> int:
    """Seconds in a duration; raises ValueError with the accepted forms."""
    if isinstance(value, bool):
        raise ValueError(f"expected {DURATION_HELP}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"must be positive; expected {DURATION_HELP}")
        return value
    text = value.strip().lower()
    if text.isascii() and text.isdigit():
        return parse_duration(int(text))
    if re.fullmatch(r"\d+:\d{2}:\d{2}", text, re.ASCII):
        h, m, s = (int(p) for p in text.split(":"))
        return parse_duration(h * 3600 + m * 60 + s)
    if re.fullmatch(r"(\d+\s*[dhms]\s*)+", text, re.ASCII):
        return parse_duration(sum(int(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text)))
    raise ValueError(f"expected {DURATION_HELP}")


def parse_memory_mib(value: str | int) -> int:
    """Mebibytes in a memory size (a bare number means bytes, as Kubernetes reads it)."""
    if isinstance(value, bool):
        raise ValueError(f"expected {MEMORY_HELP}")
    match = _MEMORY.match(str(value))
    if not match:
        raise ValueError(f"expected {MEMORY_HELP}")
    mib = float(match.group(1)) * _MEMORY_MIB[match.group(2)]
    if mib < 1:
        raise ValueError(f"is smaller than 1 MiB; expected {MEMORY_HELP}")
    return int(mib)


def format_slurm_time(seconds: int) -> str:
    """SLURM's D-HH:MM:SS form, rounded up to the minute SLURM schedules by."""
    minutes = -(-seconds // 60)
    days, minutes = divmod(minutes, 1440)
    hours, minutes = divmod(minutes, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:00"
