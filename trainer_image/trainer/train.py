"""`python -m trainer.train [--config FILE] [--field-name VALUE ...]`: parse, check, train, and
turn every outcome into the exit code schedulers act on (docs/contracts.md section 2).

Config and data paths are checked before torch is imported, so the commonest mistakes cost a
fraction of a second and end in one line; the loop itself is in `loop.py`.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import TYPE_CHECKING, NoReturn

from . import failpoints
from .config import TrainConfig, build_config, help_text
from .data.sources import resolve_files
from .errors import Preempted, TrainerInputError
from .exit_codes import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, EXIT_PREEMPTED, EXIT_SLOW_NODE
from .first_failure import worker_record
from .gc_pause import paused_gc
from .log import log
from .quick_exit import exit_now, exit_without_teardown
from .s3_objects import TransferFailed
from .status import write_status

if TYPE_CHECKING:
    from .training.loop import Trainer


def _from_collective(exc: BaseException) -> bool:
    """A failed gloo/NCCL collective: a peer died. One line, not a traceback, says so."""
    import torch.distributed as dist

    if isinstance(exc, dist.DistError):
        return True
    if not (isinstance(exc, RuntimeError) and dist.is_initialized()):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    if any(f"torch{os.sep}distributed{os.sep}distributed_c10d" in f.filename for f in frames):
        return True
    # DDP's gradient all-reduce fails inside backward(), with no c10d frame on the stack
    return any(word in str(exc) for word in ("third_party/gloo", "NCCL", "ProcessGroup"))


def _agreed_stop(trainer: Trainer | None, rank: int, status: str, message: str, line: str, code: int) -> NoReturn:
    """A stop every rank agreed on after a checkpoint (a signal, a slow node excluded): say why to the
    launcher (one worker per node), close the process group together, exit `code`."""
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        write_status(status, message)
    log(rank, line)
    if trainer is not None:
        trainer.close()
    exit_now(code)


def run_training(cfg: TrainConfig) -> int:
    """Train, and turn every outcome into an exit code: 0 done, 2 bad input, 143 preempted after
    a complete checkpoint, 201 a slow node excluded after a checkpoint, 1 anything else (one line when
    a collective failed or a streamed input failed after its retries). A hang (200) exits from the watchdog's thread (`hang.HangWatch`)."""
    with paused_gc():  # DDP's constructor and torch.use_deterministic_algorithms import dynamo: import it here
        import torch._dynamo  # noqa: F401
        import torch.distributed as dist

        from . import records
        from .training import rollcall
        from .training.loop import Trainer
        from .training.stragglers import SlowNode

    rank = int(os.environ.get("RANK", "0"))
    trainer: Trainer | None = None
    try:
        trainer = Trainer(cfg)
        rank = trainer.rank
        trainer.run()
        trainer.close()
        return EXIT_OK
    except TrainerInputError as exc:
        log(rank, f"error: {exc}")
        write_status("bad_input", str(exc))
        worker_record(exc)
        return exit_now(EXIT_BAD_INPUT) if dist.is_initialized() else EXIT_BAD_INPUT
    except TransferFailed as exc:  # a streamed input broke mid-run after its retries: a failed attempt (exit 1)
        log(rank, f"error: {exc}")
        worker_record(exc)
        return exit_now(EXIT_FAILURE) if dist.is_initialized() else EXIT_FAILURE
    except Preempted as exc:
        line = f"preempted: exiting with {EXIT_PREEMPTED} after checkpoint {exc}"
        return _agreed_stop(trainer, rank, "preempted", str(exc), line, EXIT_PREEMPTED)
    except SlowNode as exc:
        if trainer is not None and trainer.rank == 0:
            records.write_failure(trainer.output_dir, exc.record)
        line = f"slow node excluded: {exc}; checkpoint {exc.record['checkpoint']}; exiting {EXIT_SLOW_NODE}"
        return _agreed_stop(trainer, rank, "slow_node", str(exc), line, EXIT_SLOW_NODE)
    except Exception as exc:
        if _from_collective(exc):
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if dist.is_initialized() and rollcall.is_timeout(first):
                world = int(os.environ.get("WORLD_SIZE", "1"))  # set by torchrun, or by D.init for one process
                log(rank, "error: " + rollcall.describe(rank, world, cfg.timeout_s, first))
                return exit_now(EXIT_FAILURE)
            log(rank, f"error: a collective failed (another rank probably stopped first): {first}")
            return exit_now(EXIT_FAILURE)
        log(rank, "unexpected error:\n" + traceback.format_exc())
        worker_record(exc)
        return exit_now(EXIT_FAILURE) if dist.is_initialized() else EXIT_FAILURE


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(help_text())
        return EXIT_OK
    try:
        failpoints.check()
        cfg = build_config(argv)
        if not cfg.train_data.startswith("s3://"):  # a streamed input: the launcher checked it, the loader lists it
            resolve_files(cfg.train_data, "train_data")
        if cfg.val_data and not cfg.val_data.startswith("s3://"):
            resolve_files(cfg.val_data, "val_data")
    except TrainerInputError as exc:
        log(int(os.environ.get("RANK", "0")), f"error: {exc}")
        write_status("bad_input", str(exc))
        worker_record(exc)
        return EXIT_BAD_INPUT
    return run_training(cfg)


if __name__ == "__main__":
    exit_without_teardown(main())
