"""Timestamps from inside a training process, the same for every loop it is put under.

Put on PYTHONPATH with BENCH_PROBE_DIR set, Python imports this at start-up in every process
(trainctl, trainer-launch, torchrun, the workers). It changes nothing the program does; it
only notes, with `time.time()`:

- `start`: when the process started (from /proc, 10 ms resolution) and `site`: when the
  interpreter reached site-customisation;
- `torch_import`: begin and end of `import torch`; `dynamo_import`: of `torch._dynamo` (which
  pulls in torch._inductor; `DDP(...)` and `torch.use_deterministic_algorithms` import it);
- `pg_init`: begin and end of `torch.distributed.init_process_group`;
- `ddp_init`: begin and end of the first `DistributedDataParallel(...)` (it broadcasts the weights);
- `first_forward`: the first forward with gradients after the process group (a training step's; one rank on one
  GPU builds no DDP);
- `steps`: the end of every optimizer step (a global optimizer post-hook), `perf_counter` based.

With BENCH_PROFILE="A-B[,C-D]" it also traces optimizer steps A+1..B (and C+1..D) with `torch.profiler`
(CPU, and CUDA where there is one), the second window with Python stacks (`with_stack`: every Python
call, to place the loop's own time by function), into BENCH_PROFILE_OUT/<window>-<pid>.json
(bench/gpu_profile.py reads them).

At exit a process that imported torch writes `BENCH_PROBE_DIR/<pid>.json`. Without
BENCH_PROBE_DIR it does nothing.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
from typing import Any

_DIR = os.environ.get("BENCH_PROBE_DIR")
_REC: dict[str, Any] = {"pid": os.getpid(), "argv": list(sys.argv), "site": time.time()}
_STEPS: list[float] = []  # perf_counter at the end of each optimizer step
_CLOCK = (time.time(), time.perf_counter())  # to turn perf_counter values into wall times


def _process_start() -> float | None:
    """Wall time at which this process was started (fork/exec), from /proc (clock ticks)."""
    try:
        with open("/proc/self/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22: starttime, in clock ticks since boot
        with open("/proc/stat") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith("btime"))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return None


def _write() -> None:
    if _DIR is None or not (_STEPS or "torch_import" in _REC):
        return
    _REC["rank"] = os.environ.get("RANK")
    _REC["steps_perf"] = _STEPS
    _REC["clock"] = _CLOCK
    path = os.path.join(_DIR, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(_REC, fh)
    os.replace(path + ".tmp", path)


def _instrument_torch(torch: Any) -> None:
    """Hooks that cost a list append per optimizer step and nothing per forward after the first."""
    from torch.distributed import distributed_c10d as c10d

    original = c10d.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        begin = time.time()
        try:
            return original(*args, **kwargs)
        finally:
            _REC["pg_init"] = [begin, time.time()]

    torch.distributed.init_process_group = init_process_group
    c10d.init_process_group = init_process_group

    from torch.nn.parallel import DistributedDataParallel

    ddp_init = DistributedDataParallel.__init__

    def timed_ddp_init(self: Any, *args: Any, **kwargs: Any) -> None:
        begin = time.time()
        ddp_init(self, *args, **kwargs)
        _REC.setdefault("ddp_init", [begin, time.time()])

    DistributedDataParallel.__init__ = timed_ddp_init  # type: ignore[method-assign]

    windows = _profile_windows(os.environ.get("BENCH_PROFILE", ""))

    def after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        _STEPS.append(time.perf_counter())
        if len(_STEPS) == 1:
            _REC["first_step"] = time.time()
        if windows:
            _profile_at(torch, len(_STEPS), windows)

    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(after_step)

    handle: Any = None

    def first_forward(module: Any, inputs: Any) -> None:
        if "pg_init" not in _REC or not torch.is_grad_enabled():
            return  # a shape probe or an evaluation (no_grad) before training, not the first training step
        _REC.setdefault("first_forward", time.time())
        handle.remove()

    from torch.nn.modules.module import register_module_forward_pre_hook

    handle = register_module_forward_pre_hook(first_forward)


_PROFILER: list[Any] = []  # the profiler of the window in progress


def _profile_windows(spec: str) -> list[tuple[int, int, str]]:
    """BENCH_PROFILE "A-B,C-D": (start, stop, name) windows; the second one records Python stacks."""
    windows = []
    for i, part in enumerate(p for p in spec.split(",") if p):
        start, stop = (int(n) for n in part.split("-"))
        windows.append((start, stop, "kernels" if i == 0 else "python"))
    return windows


def _profile_at(torch: Any, step: int, windows: list[tuple[int, int, str]]) -> None:
    """Start or stop a window's profiler after optimizer step `step`; export its trace at the stop."""
    from torch.profiler import ProfilerActivity, profile

    for start, stop, name in windows:
        if step == start:
            cuda = [ProfilerActivity.CUDA] if torch.cuda.is_available() else []
            _PROFILER.append(profile(activities=[ProfilerActivity.CPU, *cuda], with_stack=name == "python"))
            _PROFILER[-1].start()
        elif step == stop and _PROFILER:
            prof = _PROFILER.pop()
            prof.stop()
            out = os.environ.get("BENCH_PROFILE_OUT", _DIR or ".")
            prof.export_chrome_trace(os.path.join(out, f"{name}-{os.getpid()}.json"))


class _TorchTimer(importlib.abc.MetaPathFinder):
    """Finds `torch` (and `torch._dynamo`) with the normal finders, times their execution and
    instruments torch."""

    timed = {"torch": "torch_import", "torch._dynamo": "dynamo_import"}

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        key = self.timed.pop(name, None)
        if key is None:
            return None
        if not self.timed:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        exec_module = loader.exec_module

        def timed_exec(module: Any) -> None:
            begin = time.time()
            exec_module(module)
            _REC[key] = [begin, time.time()]
            if key == "torch_import":
                _instrument_torch(module)

        loader.exec_module = timed_exec
        return spec


if _DIR is not None:
    _REC["start"] = _process_start()
    sys.meta_path.insert(0, _TorchTimer())
    atexit.register(_write)
