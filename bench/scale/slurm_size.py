"""SLURM at 1,024 nodes: the launcher's hostlist parser and a retry that leaves 100 nodes out, checked by
the real `scontrol` (Debian's slurm-client parses hostlists without a cluster).

- the job's `SLURM_JOB_NODELIST` for 1,024 nodes, compressed by `scontrol show hostlist`, is expanded by the
  trainer's own parser (trainer/launcher/hostlist.py `expand_hostlist`, the launcher needs no scontrol) and must
  give exactly `scontrol show hostnames`;
- the batch script's retry lines (targets/slurm/retry_script.py, bash: an attempt's start, then its end after a
  hang whose verdict.txt blames 100 nodes) run `scontrol update ExcNodeList=NODES` (a stand-in scontrol on
  their PATH records it); the real scontrol must parse NODES back to those 100 nodes. SLURM's limit is on
  ranges between brackets, MAX_RANGES = 256K (SchedMD/slurm src/common/hostlist.c, `_parse_range_list`'s
  caller `_hostlist_create_bracketed`), and a plain comma list has no length limit of its own there.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import time

from ..common import WORK, Figure, figure, unavailable

NAME = "scale"
NODES, EXCLUDED = 1024, 100


def scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", "show", *args], capture_output=True, text=True, check=True).stdout.strip()


def run_slurm(quick: bool = False) -> list[Figure]:
    if shutil.which("scontrol") is None:
        return [unavailable(NAME, f"SLURM {NODES}-node hostlist and {EXCLUDED}-node exclude", "no scontrol")]
    from trainer.launcher.hostlist import expand_hostlist

    names = [f"gpu{i:04d}" for i in range(NODES)]
    compressed = scontrol("hostlist", ",".join(names))
    t0 = time.perf_counter()
    expanded = expand_hostlist(compressed)
    parse_s = time.perf_counter() - t0
    if expanded != scontrol("hostnames", compressed).split() or expanded != names:
        raise RuntimeError(f"trainer/launcher/hostlist.py expands {compressed!r} unlike scontrol")
    figs = [figure(NAME, f"SLURM {NODES}-node hostlist: trainer's expand_hostlist", [parse_s * 1e3], unit="ms",
                   note=f"{compressed} -> {NODES} names, equal to scontrol show hostnames")]  # fmt: skip
    if quick:
        return figs
    blamed = sorted(random.Random(39).sample(names, EXCLUDED))
    run_dir = WORK / "slurm-retry"
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "out").mkdir(parents=True)
    (run_dir / "bin").mkdir()
    for tool, body in (("scontrol", f'echo "$*" >> {run_dir}/scontrol-calls'), ("sinfo", "exit 1")):
        (run_dir / "bin" / tool).write_text(f"#!/bin/sh\n{body}\n")
        (run_dir / "bin" / tool).chmod(0o755)
    env = {"PATH": f"{run_dir / 'bin'}:/usr/bin:/bin", "TRAINCTL_RUN_DIR": str(run_dir), "TRAINCTL_RUN_UID": "u39",
           "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": compressed, "SLURM_JOB_NUM_NODES": str(NODES)}  # fmt: skip
    from trainctl.targets.slurm import retry_script

    before = retry_script.setup_lines(
        str(run_dir / "log"), str(run_dir / "ck"), str(run_dir / "out"), 1, ["hang"], False
    )
    verdict = f"kind=hang\nnodes={','.join(blamed)}\n"
    script = "\n".join(["set -euo pipefail", *before, f"printf %s '{verdict}' > {run_dir}/out/verdict.txt", "rc=200",
                        *retry_script.end_lines(1, False)])  # fmt: skip
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    calls = (run_dir / "scontrol-calls").read_text().splitlines() if (run_dir / "scontrol-calls").exists() else []
    verdict = next((c for c in calls if "ExcNodeList=" in c), "")
    if not verdict:
        raise RuntimeError(f"the retry lines set no ExcNodeList: {calls} {done.stderr[-500:]}")
    exclude = verdict.split("ExcNodeList=", 1)[1]
    parsed = scontrol("hostnames", exclude).split()
    if sorted(parsed) != blamed:
        raise RuntimeError(f"scontrol reads the exclude list as {len(parsed)} nodes, not the {EXCLUDED} blamed")
    shutil.rmtree(run_dir, ignore_errors=True)
    return [
        *figs,
        figure(NAME, f"SLURM retry excluding {EXCLUDED} of {NODES} nodes: ExcNodeList length", [len(exclude)],
               unit="chars", note=f"the retry lines' ExcNodeList; scontrol parses it back to the {EXCLUDED} nodes",
               detail={"hostlistsorted_chars": len(scontrol("hostlistsorted", exclude)),
                       "slurm_limit": "MAX_RANGES 256K ranges per bracket (src/common/hostlist.c)"}),
    ]  # fmt: skip
