"""`trainer-launch [OPTIONS] -- PROGRAM [ARGS...]`: read the platform, start torchrun on this node (or, with
`--launch srun`/`per_node`, become the program with the variables of its task or node). The plan comes from
`platforms.plan_from_env` (pure); this module only does the side effects: unpack SageMaker code, wait for the
master to resolve, run torchrun's agent with every worker's output read line by line per rank (`worker_output`),
watch a `command:` job's hang rule (`quiet`), turn on the collectives' flight recorder, map exit codes, and on
SageMaker write `/opt/ml/output/failure`. At teardown a hung worker is SIGKILLed at once: torchrun's 30 s SIGTERM
grace is for a healthy worker to checkpoint (which is hung: `teardown.py`).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from . import bundle, failpoints, first_failure, function, identity, output_upload, s3_stream, tracking, untar
from .errors import TrainerInputError
from .exit_codes import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_HANG, EXIT_OK, EXIT_PREEMPTED, EXIT_SLOW_NODE
from .gc_pause import paused_gc
from .launcher import data_cache, flight_recorder, privileges, secrets
from .launcher.launch_args import parse
from .launcher.launch_plan import LaunchOptions, LaunchPlan, gpu_warning
from .launcher.platforms import detect_platform, is_platform_variable, plan_from_env
from .launcher.quiet import QuietWatch
from .launcher.sagemaker import files as sm
from .launcher.sagemaker import host as sagemaker_host
from .quick_exit import exit_without_teardown
from .s3_objects import TransferFailed
from .status import ENV as STATUS_ENV
from .status import read_status

SAGEMAKER_ROOT_ENV = "TRAINER_SAGEMAKER_ROOT"  # where /opt/ml lives: / in the container, a tmp dir in tests


def _say(message: str) -> None:
    print(f"trainer-launch: {message}", file=sys.stderr, flush=True)


def gpus_visible() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


def _free_port() -> int:
    """A port nothing on this machine holds now (for a one-node per_node command's MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mode_words(plan: LaunchPlan) -> str:
    """What the start-up line says besides the platform: which task (srun) or which node (per_node) this is."""
    if plan.mode == "srun":
        return f", srun task rank {plan.env['RANK']} of {plan.env['WORLD_SIZE']} (node {plan.node_rank})"
    if plan.mode == "per_node":
        master = f"{plan.master_addr}:{plan.master_port}"
        return f", your command once per node: node {plan.node_rank}, master {master}"
    return ""


def _resolve(host: str, port: int) -> None:
    socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


def wait_for_master(host: str, port: int, timeout_s: float, resolve: Callable[[str, int], None] = _resolve) -> None:
    """Block until `host` resolves; a rank-0 pod not yet in DNS is normal for a few seconds."""
    deadline = time.monotonic() + timeout_s
    delay = 0.2
    while True:
        try:
            resolve(host, port)
            return
        except OSError as exc:
            if time.monotonic() + delay > deadline:
                raise TimeoutError(
                    f"master address {host}:{port} did not resolve within {timeout_s:g}s ({exc}); "
                    "is the rank-0 node up and its name in DNS? Raise --master-wait if it starts slowly."
                ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def _unpack(tarball: str, dest: str) -> None:
    if not Path(tarball).exists():
        raise TrainerInputError(f"sagemaker_program is set but the code tarball {tarball} does not exist")
    try:
        untar.extract(tarball, dest)
    except untar.UnsafeMember as exc:
        raise TrainerInputError(f"code tarball {tarball}: {exc}") from exc


def _write_failure(plan: LaunchPlan | None, message: str) -> None:
    if plan is None:
        # the plan itself failed; on SageMaker the failure file still tells the console why
        root = Path(os.environ.get(SAGEMAKER_ROOT_ENV, "/"))
        if (root / sm.RESOURCE_CONFIG).exists():
            plan = LaunchPlan(platform="sagemaker", mode="torchrun", program=[])
            plan.failure_file = str(root / sm.FAILURE_FILE)
    if plan is None or not plan.failure_file:
        return
    try:
        Path(plan.failure_file).parent.mkdir(parents=True, exist_ok=True)
        Path(plan.failure_file).write_text(message + "\n")
    except OSError as exc:
        _say(f"could not write {plan.failure_file}: {exc}")


def _run_torchrun(plan: LaunchPlan, status_file: Path, tmp: Path, watch: QuietWatch | None) -> tuple[int, str | None]:
    """Run torchrun's agent in this process, the workers' output read by `worker_output`, and turn
    its outcome into our exit code and, of a program's failure, the text of its first failing rank's record."""
    with paused_gc():
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.run import parse_args, run

    from . import worker_output
    from .launcher import teardown

    extra: list[str] = []
    if worker_output.available():
        extra = [f"--logs-specs={worker_output.NAME}", f"--log-dir={tmp / 'torchelastic'}"]
        if watch is not None:
            worker_output.WATCHER = watch
    elif watch is not None:
        raise TrainerInputError("a hang rule needs the workers' output, and torchrun's logs_specs entry point "
                                f"{worker_output.NAME!r} is not installed (reinstall trainctl-trainer)")  # fmt: skip
    args = parse_args([*extra, *plan.torchrun_args()])
    started = time.time()
    try:
        with teardown.attempt_torn_down(status_file, _say):  # no 30 s grace for a hung worker, no orphan
            run(args)
        return EXIT_OK, None
    except ChildFailedError as exc:
        status = read_status(status_file).get("status")
        if status == "preempted":
            return EXIT_PREEMPTED, None
        if watch is not None:
            watch.settle()
        if status == "hang" or (watch is not None and watch.declared):
            return EXIT_HANG, None
        if status == "slow_node":
            return EXIT_SLOW_NODE, None
        rec = first_failure.reported(exc.failures, os.environ.get("TRAINER_OUTPUT_DIR"), started, _say)
        return rec["exit_code"] or EXIT_FAILURE, first_failure.text(rec)
    except SignalException as exc:
        if read_status(status_file).get("status") == "preempted":
            return EXIT_PREEMPTED, None
        _say(f"got {exc.sigval.name} before the workers checkpointed")
        return 128 + int(exc.sigval), None
    finally:
        worker_output.drain()


def _describe(code: int, status: dict[str, str]) -> str:
    if code == EXIT_BAD_INPUT:
        detail = status.get("message") or "see the worker's message above"
        return f"training stopped on bad input (exit 2): {detail}"
    if code == EXIT_PREEMPTED and status.get("status") == "preempted":
        return f"preempted: checkpoint written, exit {EXIT_PREEMPTED}"
    if code == EXIT_PREEMPTED:  # 128 + SIGTERM, but no worker said it saved: do not claim a checkpoint
        return f"stopped by SIGTERM (exit {code}) before any worker said it had saved its state"
    if code == EXIT_HANG:
        return f"a hang (exit {code}): {status.get('message') or 'see the hang lines above'}; the suspects are in failure.json"
    if code == EXIT_SLOW_NODE:
        return f"a slow node was excluded after a checkpoint (exit {code}): {status.get('message', '')}"
    return f"training failed with exit code {code}"


def check_program(name: str) -> None:
    """The program must be one this process may run, checked before anything starts it, as runc checks a
    container's command (libcontainer/standard_init_linux.go: exec.LookPath): a program that is not there is
    bad input (exit 2, never retried) on every target, not a failure of torchrun's workers that a retry repeats."""
    if shutil.which(name) is not None:
        return
    if os.sep in name and os.path.isfile(name):
        raise TrainerInputError(f"{name}: not executable (chmod +x it, or run it with its interpreter)")
    raise TrainerInputError(f"{name}: no such program (PATH={os.environ.get('PATH', '')})")


def launch(plan: LaunchPlan, opts: LaunchOptions) -> int:
    for tarball, dest in plan.unpack:
        if os.environ.get(bundle.SHA_ENV) and not os.environ.get(bundle.BUNDLE_ENV):
            bundle.verify(Path(tarball), os.environ[bundle.SHA_ENV])  # SageMaker's code channel
        _unpack(tarball, dest)
        if os.environ.get(function.ENV_SHA) and not os.environ.get(bundle.BUNDLE_ENV):  # a function in the channel
            _say(function.check({**os.environ, bundle.DIR_ENV: str(dest)}) or "")
    if plan.local_code and os.environ.get(bundle.SHA_ENV):
        _say(f"code from the folder {plan.local_code} (SageMaker local code): no bundle, its sha256 is not checked")
    for name in plan.unset:
        os.environ.pop(name, None)
    os.environ.update(plan.env)
    if plan.cwd:
        os.chdir(plan.cwd)
    if plan.wait_for is not None and plan.mode != "torchrun":
        wait_for_master(plan.wait_for[0], plan.wait_for[1], opts.master_wait)
    try:
        check_program(plan.program[0])
    except TrainerInputError as exc:
        first_failure.launcher_failed(exc, EXIT_BAD_INPUT)
        raise
    if plan.mode in ("direct", "srun", "per_node"):
        # the program itself from here on: signals reach it, and its exit code is the task's (srun) or node's
        os.execvp(plan.program[0], plan.program)
    if plan.mode == "process":
        # a SageMaker host outside the distribution instance groups: the program once, no torchrun
        code = subprocess.run(plan.program).returncode
        if code != EXIT_OK:
            message = f"training failed with exit code {code}"
            _say(message)
            _write_failure(plan, message)
        return code
    if plan.wait_for is not None:
        wait_for_master(plan.wait_for[0], plan.wait_for[1], opts.master_wait)
    os.environ.update(flight_recorder.worker_env(dict(os.environ)))
    os.environ["PYTHONPATH"] = first_failure.worker_pythonpath(os.environ)  # an exception into torch's error file
    watch = None
    if opts.hang_quiet_for is not None:
        watch = QuietWatch(opts.hang_quiet_for, opts.hang_progress, opts.hang_start_within,
                           os.environ.get("TRAINER_OUTPUT_DIR"), _say)  # fmt: skip
        os.environ.setdefault("PYTHONFAULTHANDLER", "1")  # SIGABRT then dumps every thread's stack
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    with tempfile.TemporaryDirectory(prefix="trainer-launch-") as tmp:
        status_file = Path(tmp) / "status.json"
        os.environ[STATUS_ENV] = str(status_file)
        code, said = _run_torchrun(plan, status_file, Path(tmp), watch)
        if code != EXIT_OK:
            message = _describe(code, read_status(status_file))
            _say(message)
            tracking.mark_failed(os.environ, _say)  # until an attempt starts it again (mlflow#10510)
            if code != EXIT_PREEMPTED:
                _write_failure(plan, said or message)
        return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    plan: LaunchPlan | None = None
    # Until torchrun installs its own handlers, a SIGUSR1 must not kill us with no message.
    signal.signal(signal.SIGUSR1, lambda s, f: sys.exit(128 + s))
    try:
        failpoints.check()
        opts, dry_run = parse(argv)
        if opts.platform == "local":
            # torchrun and the workers must not see the caller's platform either (torchrun reads PET_*)
            for name in [k for k in os.environ if is_platform_variable(k)]:
                del os.environ[name]
        root = Path(os.environ.get(SAGEMAKER_ROOT_ENV, "/"))
        dropped = privileges.drop_root(os.environ, root)  # before anything of the job runs
        facts = None
        if opts.platform != "local" and detect_platform(os.environ, root) == "sagemaker":
            facts = sagemaker_host.probe()  # SM_NUM_GPUS & co. as the toolkit counts them
            gpus = facts.num_gpus
        else:  # per_node tells the node's command its GPUs (SKYPILOT_NUM_GPUS_PER_NODE)
            gpus = 0 if opts.nproc_per_node and opts.launch != "per_node" else gpus_visible()
        plan = plan_from_env(
            os.environ, opts, root=root, gpus_visible=gpus, python=sys.executable, sagemaker_facts=facts,
            free_port=_free_port,
        )  # fmt: skip
        if dry_run:
            # secrets are listed (variable and id), never fetched
            shown = {**plan.to_json(), "secrets": secrets.describe(secrets.requested(os.environ))}
            print(json.dumps(shown, indent=2, sort_keys=True))
            return EXIT_OK
        as_user = f" as uid {dropped} (started as root)" if dropped is not None else ""
        _say(
            f"platform {plan.platform}{_mode_words(plan)}: {plan.nnodes} node(s) x {plan.nproc_per_node} process(es){as_user}"
        )
        if short := gpu_warning(os.environ, gpus_visible, plan.nproc_per_node):
            _say(short)
        identity.claim_from_env(_say)  # the run's folder is this run's, or the launcher stops here
        # read before --workdir changes the directory; `runs/<id>/../../data-cache` read plainly
        cache = Path(os.path.abspath(opts.data_cache)) if opts.data_cache else None
        if opts.workdir:  # as the user the job runs as (after drop_root), before the code is unpacked there
            Path(opts.workdir).mkdir(parents=True, exist_ok=True)
            os.chdir(opts.workdir)
        prepared = bundle.prepare(os.environ)  # verify the code's sha256 before anything starts
        if prepared is not None:
            plan.program = bundle.activate(prepared, plan.program)
            venv = f", venv {prepared.venv}" if prepared.venv else ""
            _say(f"code sha256 {prepared.sha256} verified; running from {prepared.code_dir}{venv}{prepared.said}")
        # TRAINCTL_SECRET_<ENV> (SageMaker passes secrets by id) becomes <ENV> before the workers start
        exported = secrets.export(os.environ)
        if exported:
            _say(f"resolved {len(exported)} secret(s) from AWS Secrets Manager: {', '.join(exported)}")
        if cache is not None:  # after the secrets: AWS keys may come through them
            try:
                plan.program = data_cache.stage_inputs(os.environ, plan.program, cache, _say)
            except (TrainerInputError, TransferFailed) as exc:
                bad = isinstance(exc, TrainerInputError)
                first_failure.launcher_failed(exc, EXIT_BAD_INPUT if bad else EXIT_FAILURE)
                raise
        if os.environ.get(s3_stream.STREAM_ENV):  # mode: stream inputs stay URIs; check them, name the endpoint
            try:
                s3_stream.announce(os.environ, _say)
            except (TrainerInputError, TransferFailed) as exc:
                bad = isinstance(exc, TrainerInputError)
                first_failure.launcher_failed(exc, EXIT_BAD_INPUT if bad else EXIT_FAILURE)
                raise
        code = launch(plan, opts)
        if opts.output_s3 and not plan.node_rank:  # torchrun or process mode: the others became the program
            code = output_upload.after_attempt(opts.output_s3, code, _say)
        return code
    except TrainerInputError as exc:
        _say(f"error: {exc}")
        _write_failure(plan, str(exc))
        return EXIT_BAD_INPUT
    except (TimeoutError, TransferFailed) as exc:
        _say(f"error: {exc}")
        _write_failure(plan, str(exc))
        return EXIT_FAILURE
    except OSError as exc:
        # e.g. SageMaker's /opt/ml folders belong to root and this process is not: one line, not a traceback
        where = f" {exc.filename}" if exc.filename else ""
        message = f"cannot use{where}: {exc.strerror or exc} (running as uid {os.getuid()})"
        _say(f"error: {message}")
        _write_failure(plan, message)
        return EXIT_FAILURE
    except Exception as exc:  # any other launcher failure still ends in one clear line (and the failure file)
        message = f"launcher failed: {type(exc).__name__}: {exc}"
        _say(f"error: {message}")
        _write_failure(plan, message)
        return EXIT_FAILURE


if __name__ == "__main__":
    exit_without_teardown(main())
