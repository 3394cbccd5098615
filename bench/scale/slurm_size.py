"""SLURM at 1,024 nodes: the launcher's hostlist parser and a retry that leaves 100 nodes out, checked by
the real `scontrol` (Debian's slurm-client parses hostlists without a cluster).

- the job's `SLURM_JOB_NODELIST` for 1,024 nodes, compressed by `scontrol show hostlist`, is expanded by the
  trainer's own parser (trainer/hostlist.py `expand_hostlist`, the launcher needs no scontrol) and must
  give exactly `scontrol show hostnames`;
- the retry program (targets/slurm/retry_program.py `main`: `start`, then `end 200` after a hang whose
  failure.json blames 100 nodes) prints `requeue NODES`, the value the batch script gives to
  `scontrol update ExcNodeList=`; scontrol must parse it back to those 100 nodes. SLURM's limit is on
  ranges between brackets, MAX_RANGES = 256K (SchedMD/slurm src/common/hostlist.c, `_parse_range_list`'s
  caller `_hostlist_create_bracketed`), and a plain comma list has no length limit of its own there.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time

from ..common import ROOT, WORK, Figure, figure, unavailable

NAME = "scale"
NODES, EXCLUDED = 1024, 100


def scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", "show", *args], capture_output=True, text=True, check=True).stdout.strip()


def run_slurm(quick: bool = False) -> list[Figure]:
    if shutil.which("scontrol") is None:
        return [unavailable(NAME, f"SLURM {NODES}-node hostlist and {EXCLUDED}-node exclude", "no scontrol")]
    from trainer.hostlist import expand_hostlist

    names = [f"gpu{i:04d}" for i in range(NODES)]
    compressed = scontrol("hostlist", ",".join(names))
    t0 = time.perf_counter()
    expanded = expand_hostlist(compressed)
    parse_s = time.perf_counter() - t0
    if expanded != scontrol("hostnames", compressed).split() or expanded != names:
        raise RuntimeError(f"trainer/hostlist.py expands {compressed!r} unlike scontrol")
    figs = [figure(NAME, f"SLURM {NODES}-node hostlist: trainer's expand_hostlist", [parse_s * 1e3], unit="ms",
                   note=f"{compressed} -> {NODES} names, equal to scontrol show hostnames")]  # fmt: skip
    if quick:  # the retry program asks slurmctld (scontrol show job, sinfo), which here times out: ~30 s
        return figs
    blamed = sorted(random.Random(39).sample(names, EXCLUDED))
    run_dir = WORK / "slurm-retry"
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "out").mkdir(parents=True)
    env = {**os.environ, "TRAINCTL_RUN_DIR": str(run_dir), "TRAINCTL_RUN_UID": "u39", "SLURM_JOB_ID": "4242",
           "SLURM_JOB_NODELIST": compressed, "PYTHONPATH": os.pathsep.join([str(ROOT / "sdk"), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    common = ["--log", str(run_dir / "log"), "--checkpoint-dir", str(run_dir / "ck"), "--output-dir", str(run_dir / "out"),
              "--retries", "1", "--retry-on", "hang"]  # fmt: skip
    prog = [sys.executable, "-m", "trainctl.targets.slurm.retry_program"]
    subprocess.run([*prog, "start", *common], env=env, check=True, capture_output=True)
    suspects = [{"node": n, "rank": 8 * names.index(n), "heartbeat_age_s": 20.0, "why": "no heartbeat"} for n in blamed]
    (run_dir / "out" / "failure.json").write_text(
        json.dumps({"kind": "hang", "time": time.time(), "suspects": suspects})
    )
    done = subprocess.run([*prog, "end", "200", *common], env=env, capture_output=True, text=True, check=True)
    verdict = done.stdout.strip()
    if not verdict.startswith("requeue "):
        raise RuntimeError(f"retry program answered {verdict!r}: {done.stderr[-500:]}")
    exclude = verdict.removeprefix("requeue ")
    parsed = scontrol("hostnames", exclude).split()
    if sorted(parsed) != blamed:
        raise RuntimeError(f"scontrol reads the exclude list as {len(parsed)} nodes, not the {EXCLUDED} blamed")
    shutil.rmtree(run_dir, ignore_errors=True)
    return [
        *figs,
        figure(NAME, f"SLURM retry excluding {EXCLUDED} of {NODES} nodes: ExcNodeList length", [len(exclude)],
               unit="chars", note=f"the retry program's `requeue` list; scontrol parses it back to the {EXCLUDED} nodes",
               detail={"hostlistsorted_chars": len(scontrol("hostlistsorted", exclude)),
                       "slurm_limit": "MAX_RANGES 256K ranges per bracket (src/common/hostlist.c)"}),
    ]  # fmt: skip
