"""`python -m trainer.verify DIR [--model NAME]`: the checkpoint a resume from DIR would use.

The trainer's own choice (`checkpoint.select`: the newest `step-*` whose meta.json reads, whose
files have their recorded sizes and pass their zip CRCs, and whose state loads), printed as one
JSON line with its metadata, so a tool outside the trainer (trainctl's `--resume-from`) asks the
trainer image or venv instead of re-implementing the checks. Skipped checkpoints are named on
stderr. Exit 2 when none verifies, or when the newest complete one belongs to another model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import checkpoint as ckpt
from .errors import CheckpointCorrupt, TrainerInputError


def newest(root: Path, model: str | None) -> dict[str, object]:
    """Metadata (+ `path`) of the checkpoint a resume would take; TrainerInputError if none."""
    for path in ckpt.candidates(root):
        try:
            meta = ckpt.read_meta(path)
            if model is not None:
                ckpt.check_compatible(path, meta, model)
            ckpt.verify_files(path, meta)
            ckpt.load_state(path)
        except CheckpointCorrupt as exc:
            print(f"skipping unusable checkpoint: {exc}", file=sys.stderr)
            continue
        return {"path": str(path), **{k: v for k, v in meta.items() if k != "files"}}
    raise TrainerInputError(f"{root}: no checkpoint that verifies (step-* directories: {len(ckpt.candidates(root))})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.verify", description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a checkpoint directory (its step-* directories)")
    parser.add_argument("--model", help="refuse a checkpoint written by another model")
    args = parser.parse_args(argv)
    try:
        print(json.dumps(newest(args.root, args.model), sort_keys=True))
    except TrainerInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
