"""Times as people read them (status, list, reprs): an age, a local time, a duration. Pure, and free of
pydantic, so the CLI's table can use them without loading the run records."""

from __future__ import annotations

import time


def age(created: float) -> str:
    """How long ago a Unix time was, in its largest unit: `42s`, `5m`, `3h`, `2d`."""
    seconds = max(0, int(time.time() - created))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def local_time(stamp: float) -> str:
    """A Unix time as people read it here: `2026-11-24 04:40:12 (5m ago)`, in the local time zone."""
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(stamp))} ({age(stamp)} ago)"


def duration(seconds: float) -> str:
    """`1h 02m 03s`, `4m 05s`, `12.3s`: how long something took, as `docker ps` and `gh run` say it."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m {secs:02d}s" if hours else f"{minutes}m {secs:02d}s"
