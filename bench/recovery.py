"""Benchmark 8: what a fault costs a run that retries: the time from the fault to training again, and goodput.

The digits job on the local target (2 gloo processes, `retries: 2`, `trainer.hang_timeout: 10`, a checkpoint
every 20 steps), as a user submits it: trainctl's runner retries, the trainer resumes from the newest
checkpoint. After 60 steps one fault: rank 1's worker SIGKILLed (it crashed), SIGSTOPped (it hangs: the
watchdog ends the attempt), or the launcher SIGTERMed (a preemption: checkpoint, exit 143), and a run
with no fault beside them.

- back to training: from the fault to the first step logged by the next attempt (metrics.jsonl's time).
- goodput: useful step time / wall time, where useful step time is the run's final step count times the
  mean step time of the fault-free run, and wall time runs from the runner's start to its exit record.
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import re
import shutil
import signal
import statistics
import time
from pathlib import Path
from typing import Any

import psutil

from .common import WORK, Figure, figure
from .datasets import digits, digits_val

NAME = "recovery"
FAULT_AT_STEP = 60
FAULTS = ("none", "worker killed", "worker stopped (hang)", "launcher preempted")


def _rows(out: Path) -> list[dict[str, Any]]:
    path = out / "metrics.jsonl"
    text = path.read_text() if path.exists() else ""
    return [r for r in (json.loads(x) for x in text.splitlines() if x.strip()) if r.get("kind") == "train"]


def _rank_pid(run_dir: Path, rank: int) -> int | None:
    from trainctl.targets.processes import read_json, run_processes

    for proc in run_processes(run_dir, read_json(run_dir / "job.pid")):
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get("RANK") == str(rank) and "LOCAL_RANK" in env and "trainer.train" in " ".join(proc.cmdline()):
            return proc.pid
    return None


def _inject(fault: str, run_dir: Path) -> float:
    from trainctl.targets.processes import read_json

    if fault == "launcher preempted":
        os.kill(int(read_json(run_dir / "job.pid")["pid"]), signal.SIGTERM)
    else:
        pid = _rank_pid(run_dir, 1)
        if pid is None:
            raise RuntimeError("rank 1's worker not found")
        os.kill(pid, signal.SIGKILL if fault == "worker killed" else signal.SIGSTOP)
    return time.time()


def once(fault: str, rep: int, epochs: int, hang_timeout: int = 10, step_ms: int = 0) -> dict[str, Any]:
    """One run with `fault` injected at step FAULT_AT_STEP. `step_ms` (quick mode) slows each step by that much
    (failpoint `compute=slow`): 5 epochs of ~5 ms steps end within a second, and under load the fault could land
    after the last logged step (CI: the retry then had nothing left to train, and no row to time)."""
    from trainctl import Job, RunState

    work = WORK / "recovery" / f"{re.sub(r'[^a-z]+', '-', fault)}-{rep}"  # its own folder: quick runs them at once
    shutil.rmtree(work, ignore_errors=True)
    job = Job.parse({
        "name": "recovery", "retries": 2,
        "trainer": {"model": "digits", "batch_size": 32, "epochs": epochs, "lr": 0.003, "log_every": 5,
                    "hang_timeout": hang_timeout},
        "resources": {"nodes": 1, "procs_per_node": 2}, "checkpoint": {"every_steps": 20},
        "data": {"train": str(digits()), "val": str(digits_val())},
        "local": {"workdir": str(work)},
        "env": {"TRAINER_FAILPOINTS": f"compute=slow({step_ms})"} if step_ms else {},
    })  # fmt: skip
    run = job.submit("local")
    run_dir, out = Path(run.paths.run_dir or ""), Path(run.paths.output_dir or "")
    injected = None
    try:
        if fault != "none":
            deadline = time.monotonic() + 300
            while max((r["step"] for r in _rows(out)), default=0) < FAULT_AT_STEP:
                if time.monotonic() > deadline or run.status().state.finished:
                    raise RuntimeError(f"{fault}: the run did not reach step {FAULT_AT_STEP}")
                time.sleep(0.05)
            injected = _inject(fault, run_dir)
        status = run.wait(timeout=600, poll=0.5)
    finally:
        if not run.status().state.finished:
            run.cancel()
    if status.state is not RunState.SUCCEEDED:
        raise RuntimeError(f"{fault}: the run ended {status.state.value}: {status.reason}")
    done = json.loads((run_dir / "exit.json").read_text())
    rows = _rows(out)
    attempts = done.get("attempts") or []
    result: dict[str, Any] = {
        "fault": fault, "attempts": len(attempts), "final_step": max(r["step"] for r in rows),
        "wall_s": done["finished_at"] - done["started_at"],
        "step_s": statistics.mean(r["step_time_s"] for r in rows if r.get("step_time_s")),
    }  # fmt: skip
    if injected is not None:
        if len(attempts) < 2:
            raise RuntimeError(f"{fault}: no second attempt ({attempts})")
        restarted = attempts[1]["started_at"]
        after = [r["time"] for r in rows if r["time"] > restarted]
        if not after:
            raise RuntimeError(f"{fault}: the retry logged no step (the fault landed after training's end?)")
        result["back_to_training_s"] = min(after) - injected
        result["cause"] = attempts[0].get("cause")
    return result


def _at_once(epochs: int, hang_s: int, step_ms: int) -> dict[str, list[dict[str, Any]]]:
    """Quick mode: one run of each fault, the four at once, each in a process of its own (its own SDK state;
    they share the run store, which takes concurrent writers): a check that every path runs, in the time of
    the slowest; the seconds it reports carry the other runs' load."""
    digits(), digits_val()  # made once, before the runs read them
    with concurrent.futures.ProcessPoolExecutor(len(FAULTS), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {f: pool.submit(once, f, 0, epochs, hang_s, step_ms) for f in FAULTS}
        return {fault: [future.result()] for fault, future in futures.items()}


def run(quick: bool = False) -> list[Figure]:
    reps, epochs, hang_s, step_ms = (1, 5, 5, 30) if quick else (3, 20, 10, 0)  # quick: a check that it runs
    os.environ["TRAINCTL_HOME"] = str(WORK / "recovery" / "home")  # the runs' records stay out of the user's
    if quick:
        rows = _at_once(epochs, hang_s, step_ms)
    else:
        rows = {fault: [once(fault, i, epochs, hang_s, step_ms) for i in range(reps)] for fault in FAULTS}
    step_s = statistics.mean(r["step_s"] for r in rows["none"])
    figs: list[Figure] = []
    for fault, got in rows.items():
        goodput = [r["final_step"] * step_s / r["wall_s"] for r in got]
        detail = {"rows": [{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for r in got]}
        note = f"digits, 2 gloo processes, {epochs} epochs; fault after step {FAULT_AT_STEP}; checkpoint every 20"
        note += "; quick: the four runs at once" if quick else ""
        figs.append(figure(NAME, f"goodput, {fault}", goodput, unit="x", detail=detail, note=note))
        if fault != "none":
            figs.append(figure(NAME, f"fault to training again, {fault}", [r["back_to_training_s"] for r in got],
                               unit="s", note=f"attempt 1 ended {got[0]['cause']}; hang_timeout {hang_s} s; "
                                              "includes the runner's retry and the new attempt's start-up"))  # fmt: skip
    shutil.rmtree(WORK / "recovery", ignore_errors=True)
    return figs
