"""`python -m trainer.verify DIR [--model NAME] [-- TRAINER FLAGS]`: the checkpoint a resume from DIR would use.

The trainer's own choice (`checkpoint.select`: the newest `step-*` whose meta.json reads, whose
files have their recorded sizes and pass their zip CRCs, and whose state loads), printed as one
JSON line with its metadata, so a tool outside the trainer (trainctl's `--resume-from`) asks the
trainer image or venv instead of re-implementing the checks. Skipped checkpoints are named on
stderr. Given the resuming run's trainer flags (after `--`), the line also holds `changes`: each
setting that differs from the checkpoint's (`lr 0.003 -> 0.01`, what the trainer logs when it resumes).
Exit 2 when none verifies, when the newest complete one belongs to another model, or when the flags
change a setting the saved state depends on (model_args, optimizer, strategy).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .checkpoint import files as ckpt
from .config import FIELDS, default_of, parse_flags
from .errors import CheckpointCorrupt, TrainerInputError


def settings_from_flags(flags: list[str]) -> dict[str, Any]:
    """The settings a run with these trainer flags has (defaults for the rest), as a checkpoint records them."""
    _, given = parse_flags(flags)  # typed, as the trainer reads them
    values = {name: default_of(name) for name in FIELDS}
    values.update(given)
    return {k: v for k, v in values.items() if k not in ckpt.PATH_FIELDS}


def newest(root: Path, model: str | None, settings: dict[str, Any] | None = None) -> dict[str, object]:
    """Metadata (+ `path`, and `changes` given `settings`) of the checkpoint a resume would take;
    TrainerInputError if none."""
    for path in ckpt.candidates(root):
        try:
            meta = ckpt.read_meta(path)
            if model is not None:
                ckpt.check_compatible(path, meta, model, settings)
            ckpt.verify_files(path, meta)
            ckpt.load_state(path)
        except CheckpointCorrupt as exc:
            print(f"skipping unusable checkpoint: {exc}", file=sys.stderr)
            continue
        found: dict[str, object] = {"path": str(path), **{k: v for k, v in meta.items() if k != "files"}}
        if settings is not None:
            found["changes"] = ckpt.changes(meta.get("config") or {}, settings)
        return found
    raise TrainerInputError(f"{root}: no checkpoint that verifies (step-* directories: {len(ckpt.candidates(root))})")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, flags = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, None)
    parser = argparse.ArgumentParser(prog="python -m trainer.verify", description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a checkpoint directory (its step-* directories)")
    parser.add_argument("--model", help="refuse a checkpoint written by another model")
    args = parser.parse_args(own)
    try:
        settings = settings_from_flags(flags) if flags is not None else None
        model = args.model or (str(settings["model"]) if settings is not None else None)
        print(json.dumps(newest(args.root, model, settings), sort_keys=True))
    except TrainerInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
