"""The launcher's command line (`trainer-launch [OPTIONS] -- PROGRAM [ARGS...]`): parsed and checked into
`LaunchOptions` before anything starts, so a bad flag is exit 2 with what to fix."""

from __future__ import annotations

import argparse
import re

from ..errors import TrainerInputError
from .launch_modes import MODES
from .launch_plan import LaunchOptions


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trainer-launch",
        usage="trainer-launch [OPTIONS] -- PROGRAM [ARGS...]",
        description="Detect SLURM, Kubeflow, SageMaker, torchrun or local and start torchrun.",
    )
    p.add_argument(
        "--launch",
        choices=MODES,
        default="torchrun",
        help="torchrun: start torchrun here; srun: this is one SLURM task per process, run the program with "
        "RANK & co. from SLURM_PROCID & co.; per_node: run the program (your own launcher) once on this node "
        "with NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE",
    )
    p.add_argument("--nproc-per-node", type=int, default=None, help="processes per node")
    p.add_argument("--nnodes", default=None, help="node count, N or MIN:MAX (elastic)")
    p.add_argument("--max-restarts", type=int, default=0, help="torchrun --max-restarts")
    p.add_argument("--master-port", type=int, default=None, help="rendezvous port (default 29500)")
    p.add_argument("--rdzv-backend", choices=["static", "c10d"], default=None)
    p.add_argument("--master-wait", type=float, default=300.0, help="seconds to wait for DNS")
    p.add_argument(
        "--platform",
        choices=["auto", "local"],
        default="auto",
        help="local: one node on this machine, whatever platform variables the caller's environment holds",
    )
    p.add_argument(
        "--workdir",
        default=None,
        help="create this folder and run the program in it (a code bundle without TRAINER_CODE_DIR unpacks there)",
    )
    p.add_argument(
        "--data-cache",
        default=None,
        metavar="DIR",
        help="stage each s3:// input (TRAINER_DATA_<NAME>) into this verified cache before the workers start; "
        "the variable and program words naming the URI become the local copy's path",
    )
    p.add_argument(
        "--output-s3",
        default=None,
        metavar="URI",
        help="node 0: at the end of the attempt, upload the output folder (TRAINER_OUTPUT_DIR) to URI/<run uid>/, "
        "each file verified, then a _complete manifest",
    )
    p.add_argument("--dry-run", action="store_true", help="print the launch plan as JSON and exit")
    p.add_argument(
        "--hang-quiet-for",
        type=float,
        default=None,
        metavar="S",
        help="a hang: no progress line from this node's workers for S seconds (exit 200)",
    )
    p.add_argument(
        "--hang-progress",
        default=None,
        metavar="REGEX",
        help="what counts as a progress line (Python regex, searched); default: any line",
    )
    p.add_argument("--hang-start-within", type=float, default=None, metavar="S",
                   help="a hang also when no progress line came within S seconds of the start")  # fmt: skip
    return p


def parse(argv: list[str]) -> tuple[LaunchOptions, bool]:
    if argv[:1] == ["train"]:
        # SageMaker starts a custom image as `docker run IMAGE train`: with this ENTRYPOINT that
        # arrives as a lone "train", which means "no PROGRAM: take it from the hyperparameters".
        argv = argv[1:]
    if "--" in argv:
        cut = argv.index("--")
        own, program = argv[:cut], argv[cut + 1 :]
    else:
        own, program = argv, []
    ns = _parser().parse_args(own)
    if ns.nnodes is not None:
        parts = ns.nnodes.split(":")
        if not all(p.isdigit() and int(p) > 0 for p in parts) or len(parts) > 2:
            raise TrainerInputError(f"--nnodes {ns.nnodes!r}: expected N or MIN:MAX")
    if ns.nproc_per_node is not None and ns.nproc_per_node < 1:
        raise TrainerInputError(f"--nproc-per-node {ns.nproc_per_node}: must be at least 1")
    for flag, value in (("--hang-quiet-for", ns.hang_quiet_for), ("--hang-start-within", ns.hang_start_within)):
        if value is not None and value <= 0:
            raise TrainerInputError(f"{flag} {value:g}: must be a positive number of seconds")
    for flag, given in (("--hang-progress", ns.hang_progress), ("--hang-start-within", ns.hang_start_within)):
        if given is not None and ns.hang_quiet_for is None:
            raise TrainerInputError(f"{flag} needs --hang-quiet-for")
    if ns.hang_progress is not None:
        try:
            re.compile(ns.hang_progress)
        except re.error as exc:
            raise TrainerInputError(f"--hang-progress {ns.hang_progress!r}: not a regular expression: {exc}") from None
    opts = LaunchOptions(
        program=program,
        nproc_per_node=ns.nproc_per_node,
        nnodes=ns.nnodes,
        max_restarts=ns.max_restarts,
        master_port=ns.master_port,
        rdzv_backend=ns.rdzv_backend,
        master_wait=ns.master_wait,
        platform=ns.platform,
        workdir=ns.workdir,
        launch=ns.launch,
        hang_quiet_for=ns.hang_quiet_for,
        hang_progress=ns.hang_progress,
        hang_start_within=ns.hang_start_within,
        data_cache=ns.data_cache,
        output_s3=ns.output_s3,
    )
    return opts, ns.dry_run
