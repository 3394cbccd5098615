"""`python -m trainer.train [--config FILE] [--field-name VALUE ...]`: parse, check, train.

Config and data paths are checked before torch is imported, so the commonest mistakes cost a
fraction of a second and end in one line; the loop itself is in `loop.py`.
"""

from __future__ import annotations

import os
import sys

from .config import build_config, help_text
from .errors import TrainerInputError
from .exit_codes import EXIT_BAD_INPUT, EXIT_OK
from .log import log
from .sources import resolve_files
from .status import write_status


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(help_text())
        return EXIT_OK
    try:
        cfg = build_config(argv)
        resolve_files(cfg.train_data, "train_data")
        if cfg.val_data:
            resolve_files(cfg.val_data, "val_data")
    except TrainerInputError as exc:
        log(int(os.environ.get("RANK", "0")), f"error: {exc}")
        write_status("bad_input", str(exc))
        return EXIT_BAD_INPUT
    from .loop import run_training

    return run_training(cfg)


if __name__ == "__main__":
    sys.exit(main())
