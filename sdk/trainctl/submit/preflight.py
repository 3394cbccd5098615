"""Everything `submit` checks before it asks an engine: one function, so `validate` cannot drift from it.

`trainctl validate`, `Job.check` and `Job.submit` all call `check`: the target's required section fields,
the `code:` folder (it must be here and pack), the command's script (in the code folder; on the local
target, where the run reads it), a `trainer.model: module:fn`'s module (in the code folder), the target's own inputs (the local target's data and secret files) and
the render itself. Only the engine's answer is left to submit.
"""

from __future__ import annotations

import ast
import posixpath
from pathlib import Path
from typing import TypeVar

from ..errors import JobError, TrainctlError, did_you_mean
from ..spec.job_spec import JobSpec
from ..targets.base import SubmitOptions
from ..targets.lookup import get_target
from ..targets.program import script_index
from ..targets.registry import canonical
from .bundle import prepare, prepared

J = TypeVar("J", bound=JobSpec)


def check(job: J, target: str = "local", options: SubmitOptions | None = None) -> J:
    """The job prepared for `target` (its code bundle packed), or a JobError listing every problem that
    `submit` with these options (parsed; default: none given) would refuse it for without asking the engine."""
    target = canonical(target)
    chosen = get_target(target)
    parsed = options if options is not None else chosen.parse_options()
    problems = list(job.section(target).required_for_submit())
    job = prepare(job)
    try:
        bundle = prepared(job)
    except JobError as exc:  # the code folder is not here
        problems += exc.problems
        bundle = None
    if bundle is not None:
        files = {name for name, _ in bundle.files}
        problems += _script_in_bundle(job, files, str(bundle.source))
        problems += _model_in_bundle(job, files, str(bundle.source))
    if not problems:
        problems += chosen.check_inputs(job, parsed)
    if problems:
        raise JobError(problems)
    try:
        chosen.render_for(job, parsed)
    except JobError:
        raise
    except TrainctlError as exc:
        raise JobError([str(exc)]) from None
    return job


def advice(job: JobSpec, target: str = "local") -> list[str]:
    """What would run but likely not as meant (warnings, not refusals): GPUs no process uses, a launcher
    under a launcher (spec/launching.py), and the target's own (`Target.advice`: the local machine's GPUs).
    `validate`, `render` and `submit` print them; `Job.check` returns them."""
    from ..spec.launching import launch_advice

    return launch_advice(job) + get_target(canonical(target)).advice(job)


def backend(job: JobSpec, target: str = "local") -> str:
    """The backend the run will use, as validate's line names it (agreeing with the target's GPU advice): the
    trainer's own `backend` when set, else `auto`'s rule (trainer/training/distributed.py: nccl with CUDA, else gloo)
    on the GPUs a node shows (`Target.gpus_shown`: this machine's, on the local target)."""
    chosen = job.trainer.backend if job.trainer is not None else "auto"
    if chosen != "auto":
        return chosen
    asked = job.resources.gpus_per_node
    if asked and get_target(canonical(target)).gpus_shown() == 0:
        return "gloo (this machine shows no GPU)"
    return "nccl" if asked else "gloo"


def _script_in_bundle(job: JobSpec, files: set[str], folder: str) -> list[str]:
    """A `command:` whose script (`python train.py`, `./run.sh`) is missing from the code folder it runs from."""
    if job.command is None:
        return []
    at = script_index(job.command)
    if at is None:
        return []
    word = posixpath.normpath(job.command[at])
    if word in files:
        return []
    hint = did_you_mean(word, sorted(files))
    return [f"command[{at}]: {job.command[at]!r} is not in the code folder {folder!r}{hint}"]


def _modules(files: set[str]) -> set[str]:
    """The modules a folder on sys.path provides: `a/b.py` gives a.b and (a namespace package at least) a."""
    found: set[str] = set()
    for name in files:
        if name.endswith(".py"):
            parts = name.removesuffix(".py").removesuffix("/__init__").split("/")
            found.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return found


def _model_in_bundle(job: JobSpec, files: set[str], folder: str) -> list[str]:
    """A `trainer.model: module:build_fn` whose module is not in the code folder, where the trainer imports it
    from (the code folder leads PYTHONPATH): the run would fail at its start. Left alone: the image's own
    `trainer.*`, and a name unlike any module there when a requirements file may install it."""
    if job.trainer is None or ":" not in job.trainer.model or job.code is None:
        return []
    module, _, function = job.trainer.model.partition(":")
    known = _modules(files)
    if module.split(".")[0] == "trainer":
        return []
    if module in known:
        return _function_in_module(module, function.split(".")[0], files, folder)
    hint = did_you_mean(module, sorted(known))
    if not hint and job.code.requirements:
        return []
    path = module.replace(".", "/")
    return [
        f"trainer.model: module {module!r} is not in the code folder {folder!r}{hint}; "
        f"expected {path}.py or {path}/__init__.py there"
    ]


def _function_in_module(module: str, function: str, files: set[str], folder: str) -> list[str]:
    """`module:build_fn` whose module is in the code folder but defines no `build_fn` at its top level (a def, a
    class, an assignment or an import, also under if/try): the run would fail at its start. Left alone: a module
    that may define names it does not show (`import *`, a module `__getattr__`), or one that does not parse."""
    path = module.replace(".", "/")
    file = next((f for f in (f"{path}.py", f"{path}/__init__.py") if f in files), None)
    names = _top_level_names(Path(folder) / file) if file else None
    if names is None or function in names:
        return []
    hint = did_you_mean(function, sorted(n for n in names if not n.startswith("_")))
    return [f"trainer.model: {module!r} ({file} in the code folder) defines no {function!r}{hint}"]


def _top_level_names(path: Path) -> set[str] | None:
    try:
        body = ast.parse(path.read_text(), str(path)).body
    except (OSError, SyntaxError, ValueError):
        return None
    names: set[str] = set()
    stack: list[ast.stmt] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(alias.name == "*" for alias in node.names):
                return None
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        for field in ("body", "orelse", "finalbody"):  # if/try/with/for: their statements are the module's too
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                stack.extend(getattr(node, field, []) or [])
        stack.extend(s for h in getattr(node, "handlers", []) or [] for s in h.body)
    return None if "__getattr__" in names else names
