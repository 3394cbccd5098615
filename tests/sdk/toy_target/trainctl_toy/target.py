"""The toy target: render is an sh script (pure); submit runs it in the background here and returns at once."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from trainctl.targets.api import (
    JobError,
    JobSpec,
    NoOptions,
    Paths,
    Rendered,
    RunRef,
    RunState,
    RunStatus,
    Target,
    state_dir,
)

from .handle import ToyHandle
from .section import ToySection


def script(job: JobSpec) -> str:
    if job.command is None:
        raise JobError(["command: the toy target runs a command: job only (give command:, not trainer:)"])
    section = job.section("toy")
    assert isinstance(section, ToySection)
    env = {**job.env, "TOY_GREETING": section.greeting}
    lines = ["#!/bin/sh", *(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items()))]
    return "\n".join([*lines, 'echo "$TOY_GREETING"', f"exec {shlex.join(job.command)}", ""])


class ToyTarget(Target[NoOptions]):
    name = "toy"
    section = ToySection
    options = NoOptions

    def render(self, job: JobSpec) -> Rendered:
        text = script(job)
        return Rendered(target="toy", text=text, native=text.splitlines(), filename=f"{job.name}.toy.sh")

    def engine(self) -> ModuleType:
        import sys

        return sys.modules[__name__]

    def schedule(self, job: JobSpec, options: NoOptions) -> RunRef:
        return submit(job)


def submit(job: JobSpec) -> RunRef:
    native = f"{job.name}-{time.time_ns()}"
    folder = state_dir() / "toy" / native
    folder.mkdir(parents=True)
    (folder / "run.sh").write_text(script(job))
    log = folder / "log.txt"
    wrapper = "sh run.sh > log.txt 2>&1; echo $? > exit.txt"
    proc = subprocess.Popen(["sh", "-c", wrapper], cwd=folder, start_new_session=True)
    paths = Paths(run_dir=str(folder), work_dir=str(folder), log=str(log))
    return RunRef(target="toy", native_id=native, job_name=job.name, paths=paths, handle=ToyHandle(pid=proc.pid))


def status(run: RunRef) -> RunStatus:
    folder = Path(str(run.paths.run_dir))
    done = folder / "exit.txt"
    if done.is_file() and done.read_text().strip():
        code = int(done.read_text())
        state = RunState.SUCCEEDED if code == 0 else RunState.FAILED
        return RunStatus(state=state, native_state=f"exit {code}", exit_code=code, log=run.paths.log)
    pid = ToyHandle.of(run).pid
    try:
        os.kill(int(pid or 0), 0)
    except OSError:
        return RunStatus(state=RunState.FAILED, native_state="gone", reason="its sh ended without an exit code")
    return RunStatus(state=RunState.RUNNING, native_state="running", log=run.paths.log)


def logs(run: RunRef, follow: bool = False) -> Iterator[str]:
    while follow and not status(run).state.finished:
        time.sleep(0.1)
    yield from Path(str(run.paths.log)).read_text().splitlines()


def cancel(run: RunRef) -> None:
    pid = ToyHandle.of(run).pid
    if pid:
        os.killpg(pid, signal.SIGTERM)


TARGET = ToyTarget()
