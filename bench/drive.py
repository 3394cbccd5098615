"""Benchmark 4: how long driving trainctl takes, next to interpreter start-up and TorchX.

Wall time of `trainctl --help`, `trainctl validate JOB` and `trainctl render JOB --target T`
for each target (a 2-node x 2-process DDP job; local: 1 node), against `python -c pass` from
the same venv and `torchx run --dryrun -s slurm dist.ddp -j 2x2 --script train.py` (TorchX in
its own venv under bench/.work, installed from PyPI by this benchmark, run with only that venv
on PATH so it cannot query a SLURM controller). Repetitions are
interleaved, so every case sees the same load.

Both sides run from cached bytecode, as installed packages do: pip compiled TorchX's modules when it installed
them, and an editable checkout writes trainctl's on first import, unless PYTHONDONTWRITEBYTECODE is set (as it
is in some sandboxes and CI images), which would make every trainctl command compile its sources again. The
benchmark therefore runs both without that variable; the untimed warm-up round writes the cache.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from functools import partial
from pathlib import Path

from trainctl.targets.registry import names

from .common import VENV_BIN, WORK, Figure, base_env, figure, interleaved, module_available, unavailable, wall
from .datasets import digits
from .jobs import write_job

TARGETS = names()  # the installed targets (their entry points)

NAME = "drive"
TORCHX_VERSION = "0.7.0"
TORCHX_VENV = WORK / "torchx-venv"


def ensure_torchx() -> tuple[Path | None, str]:
    """The torchx executable (installing it into its own venv if needed), or None and why not.

    torchx declares no torch dependency, so this pulls no CUDA wheels; `dist.ddp --dryrun`
    only writes the sbatch script and needs no torch either."""
    exe = TORCHX_VENV / "bin" / "torchx"
    if exe.is_file():
        return exe, f"torchx {TORCHX_VERSION} (already in {TORCHX_VENV})"
    steps = [
        ["python3", "-m", "venv", str(TORCHX_VENV)],
        [str(TORCHX_VENV / "bin" / "pip"), "install", "--quiet", f"torchx=={TORCHX_VERSION}"],
    ]
    for argv in steps:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            return None, f"`{' '.join(argv)}` failed: {proc.stderr.strip()[-500:]}"
    return (exe, f"torchx {TORCHX_VERSION} installed into {TORCHX_VENV}") if exe.is_file() else (None, "no torchx")


def trainctl_available() -> str | None:
    exe = VENV_BIN / "trainctl"
    if not exe.is_file():
        return f"{exe} is not installed"
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, env=base_env())
    return None if proc.returncode == 0 else f"`trainctl --help` exits {proc.returncode}: {proc.stderr[-300:]}"


def run(quick: bool = False) -> list[Figure]:
    reps = 1 if quick else 9
    env = base_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # compiled once, as an install is (module docstring)
    digits()  # the local job's data: `validate` checks that it is there
    work = WORK / "drive"
    work.mkdir(parents=True, exist_ok=True)
    (work / "train.py").write_text("print('hello from train.py')\n")
    trainctl = str(VENV_BIN / "trainctl")
    cases: dict[str, Callable[[], float]] = {
        "python -c pass": partial(wall, [str(VENV_BIN / "python"), "-c", "pass"], env)
    }
    why_not = trainctl_available()
    missing = {t: module_available(f"trainctl.targets.{t}") for t in TARGETS}  # a target still being built
    ready = [t for t in TARGETS if missing[t] is None]
    jobs = {tgt: write_job(tgt, work) for tgt in TARGETS}
    if why_not is None:
        cases["trainctl --help"] = partial(wall, [trainctl, "--help"], env)
        cases["trainctl validate"] = partial(wall, [trainctl, "validate", str(jobs["local"])], env)
        for tgt in ready:
            cases[f"trainctl render --target {tgt}"] = partial(
                wall, [trainctl, "render", str(jobs[tgt]), "--target", tgt], env
            )
    torchx, torchx_how = ensure_torchx()
    if torchx is not None:
        argv = [str(torchx), "run", "--dryrun", "-s", "slurm", "dist.ddp", "-j", "2x2", "--script", "train.py"]
        # Only its own venv on PATH: with SLURM's `sinfo` reachable, torchx's slurm dry run also asks the
        # controller for partition memory, which on this machine takes 0.01-9 s depending on the test
        # cluster's state. Leaving that out compares the two dry runs' own work (and favours torchx).
        torchx_env = {**env, "PATH": str(torchx.parent)}
        cases["torchx dryrun"] = partial(wall, argv, torchx_env, work)
    times = interleaved(cases, reps)
    py = times["python -c pass"]
    figs = [figure(NAME, "python -c pass", py, unit="s", note="interpreter start-up, same venv")]
    if why_not is not None:
        figs.append(unavailable(NAME, "trainctl --help minus python start-up", why_not, target="<= 0.25", unit="s"))
        for tgt in TARGETS:
            figs.append(unavailable(NAME, f"torchx dryrun / trainctl render --target {tgt}", why_not, ">= 3", "x"))
    else:
        figs.append(
            figure(
                NAME,
                "trainctl --help minus python start-up",
                [h - p for h, p in zip(times["trainctl --help"], py, strict=True)],
                unit="s",
                target="<= 0.25",
            )
        )
        figs.append(figure(NAME, "trainctl --help", times["trainctl --help"], unit="s"))
        figs.append(
            figure(NAME, "trainctl validate (local job)", times["trainctl validate"], unit="s", target="<= 0.2")
        )
        for tgt in TARGETS:
            if tgt not in ready:
                figs.append(unavailable(NAME, f"trainctl render --target {tgt}", missing[tgt] or "", unit="s"))
                continue
            figs.append(
                figure(
                    NAME,
                    f"trainctl render --target {tgt}",
                    times[f"trainctl render --target {tgt}"],
                    unit="s",
                    target="<= 0.2",
                )
            )
    if torchx is None:
        for tgt in TARGETS:
            figs.append(unavailable(NAME, f"torchx dryrun / trainctl render --target {tgt}", torchx_how, ">= 3", "x"))
    else:
        figs.append(
            figure(
                NAME, "torchx run --dryrun -s slurm dist.ddp -j 2x2", times["torchx dryrun"], unit="s", note=torchx_how
            )
        )
        if why_not is None:
            figs.append(
                figure(
                    NAME,
                    "torchx dryrun / trainctl validate",
                    [x / y for x, y in zip(times["torchx dryrun"], times["trainctl validate"], strict=True)],
                    unit="x",
                    target=">= 3",
                )
            )
            for tgt in ready:
                r = times[f"trainctl render --target {tgt}"]
                figs.append(
                    figure(
                        NAME,
                        f"torchx dryrun / trainctl render --target {tgt}",
                        [x / y for x, y in zip(times["torchx dryrun"], r, strict=True)],
                        unit="x",
                        target=">= 3",
                    )
                )
    return figs  # fmt: skip
