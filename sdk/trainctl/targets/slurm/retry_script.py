"""The batch script's lines around an attempt (pure): write the attempts program into the run's folder,
record the attempt's start, and after srun classify its end, then requeue with the blamed nodes left
out or stop.

The program is trainctl/causes.py, targets/slurm/causes.py and retry_program.py joined into one file (their
`from __future__` and relative imports dropped): the rule that decides a retry on the cluster is the one
the tests check, not a second copy in shell.

Leaving nodes out: slurmctld accepts a new ExcNodeList only for a pending job (SchedMD/slurm
src/slurmctld/job_mgr.c, `_update_job`: "exc_nodes" is refused with ESLURM_JOB_NOT_PENDING unless
IS_JOB_PENDING). So the script requeues first (`scontrol requeue`: the job is PENDING|COMPLETING while this
script still runs, so it cannot start again yet) and then sets ExcNodeList, ignoring the SIGTERM that the
requeue sends the batch step meanwhile (`trap '' TERM`, inherited by scontrol).
"""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path

from .words import sh

PROGRAM = ".attempts.py"
_SOURCES = ("../../causes.py", "causes.py", "retry_program.py")
_DROP = re.compile(r"^from (__future__|\.+\w*) import .*\n(?:^    .*\n)*", re.MULTILINE)


@functools.cache
def program_text() -> str:
    here = Path(__file__).parent
    parts = [_DROP.sub("", (here / name).read_text()) for name in _SOURCES]
    return "from __future__ import annotations\n" + "\n".join(parts)


def log_word(output: str) -> str:
    """The job's log path as a shell word: sbatch's `%j` becomes the job id."""
    return '"$SLURM_JOB_ID"'.join(shlex.quote(part) for part in output.split("%j"))


def setup_lines(output: str, checkpoint_dir: str, output_dir: str, retries: int, retry_on: list[str],
                preemption: bool) -> list[str]:  # fmt: skip
    """Before srun: the program, the `attempts` function, and the start of this attempt."""
    flags = [f"--log {log_word(output)}", f"--checkpoint-dir {sh(checkpoint_dir)}", f"--output-dir {sh(output_dir)}",
             f"--retries {retries}", f"--retry-on {','.join(retry_on)}", *(["--preemption"] if preemption else [])]  # fmt: skip
    return [
        "# Each attempt is recorded in attempts.jsonl in the run's folder; its end is classified (hang, slow",
        "# node, node lost, preempted, out of memory, application error, invalid input) by this program.",
        f"cat >\"$TRAINCTL_RUN_DIR\"/{PROGRAM} <<'TRAINCTL_ATTEMPTS_PY'",
        *program_text().rstrip("\n").split("\n"),
        "TRAINCTL_ATTEMPTS_PY",
        "attempts() {",
        f'  python3 "$TRAINCTL_RUN_DIR"/{PROGRAM} "$@" {" ".join(flags)}',
        "}",
        "attempts start || exit 1",
    ]


REQUEUE_FUNCTION = [
    "requeue() {",
    "  for wait_s in 1 2 4 8 16; do",
    '    if scontrol requeue "$SLURM_JOB_ID"; then return 0; fi',
    '    sleep "$wait_s"',
    "  done",
    '  echo "trainctl: scontrol requeue $SLURM_JOB_ID kept failing; continue it with trainctl submit --resume-from slurm:$SLURM_JOB_ID" >&2',
    "  return 1",
    "}",
]
"""slurmctld can refuse a requeue for a moment while the step's processes are still being torn down
("job is in transition"), so the script retries before giving up with a message."""


def end_lines() -> list[str]:
    """After srun (`rc` set): classify, then requeue (leaving the blamed nodes out) or fall through."""
    return [
        *REQUEUE_FUNCTION,
        'verdict=$(attempts end "$rc") || verdict=stop',
        'case "$verdict" in',
        "  preempted|requeue*)",
        "    trap '' TERM  # the requeue SIGTERMs this script; ExcNodeList is set right after it",
        '    excluded=""',
        '    case "$verdict" in requeue\\ *) excluded="${verdict#requeue }" ;; esac',
        '    if requeue && [ -n "$excluded" ]; then',
        '      scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$excluded" ||',
        '        echo "trainctl: could not exclude $excluded from job $SLURM_JOB_ID" >&2',
        "    fi",
        '    exit "$rc"',
        "    ;;",
        "esac",
    ]
