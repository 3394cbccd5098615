"""A job's name: the one rule every target's names fit, said whole when broken, and a name that keeps it.

A job name becomes a Kubernetes object name (a DNS-1035 label), a SageMaker training job name's prefix and a
SLURM job name, so one rule serves all. Pure: `init` derives a name from a file name with `mended`, and the spec
refuses a bad one with `problem` (every rule it breaks at once, not one per try).
"""

from __future__ import annotations

import re

MAX_LENGTH = 63
RULES = (
    f"a job name has at most {MAX_LENGTH} characters, lowercase letters, digits and '-'; it must start with a "
    "letter and not end with '-' (a Kubernetes DNS-1035 label, which SageMaker job names accept too)"
)
_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def mended(text: str) -> str:
    """`text` made a valid name (lowercase, other characters as '-', `job-` before a leading digit), or ''."""
    fixed = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:MAX_LENGTH].strip("-")
    if fixed and not fixed[0].isalpha():
        fixed = f"job-{fixed}"[:MAX_LENGTH].strip("-")
    return fixed


def problem(name: str) -> str | None:
    """None for a valid name; else every rule it breaks, the whole rule, and a mended name to try."""
    if _NAME.match(name) and len(name) <= MAX_LENGTH:
        return None
    checks = (
        ("it is empty", not name),
        (f"it is {len(name)} characters", len(name) > MAX_LENGTH),
        ("it has capitals", name != name.lower()),
        ("it does not start with a letter", bool(name) and not name[0].isalpha()),
        ("it has characters other than a-z, 0-9 and '-'", bool(re.search(r"[^a-zA-Z0-9-]", name))),
        ("it ends with '-'", name.endswith("-")),
    )
    broken = "; ".join(why for why, bad in checks if bad)
    fixed = mended(name)
    return f"{broken}: {RULES}" + (f"; try {fixed!r}" if fixed else "")
