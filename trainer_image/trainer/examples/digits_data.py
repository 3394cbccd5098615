"""`python -m trainer.examples.digits_data OUTDIR [--val-fraction 0.2] [--seed 0]`

Writes `train.jsonl` and `val.jsonl` from scikit-learn's bundled 8x8 digits (no download):
one record per line, `{"x": [64 floats in 0..1], "y": digit}`. The split is deterministic.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def write_digits(outdir: Path, val_fraction: float = 0.2, seed: int = 0) -> tuple[int, int]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float64)
    y = digits.target.astype(int)
    order = np.random.default_rng(seed).permutation(len(y))
    n_val = round(len(y) * val_fraction)
    val_idx, train_idx = order[:n_val], order[n_val:]
    outdir.mkdir(parents=True, exist_ok=True)
    for name, idx in (("train.jsonl", train_idx), ("val.jsonl", val_idx)):
        with open(outdir / name, "w") as fh:
            for i in idx:
                fh.write(json.dumps({"x": [round(float(v), 4) for v in x[i]], "y": int(y[i])}) + "\n")
    return len(train_idx), len(val_idx)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.examples.digits_data", description=__doc__)
    p.add_argument("outdir", type=Path)
    p.add_argument("--val-fraction", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not 0.0 < args.val_fraction < 1.0:
        p.error("--val-fraction must be between 0 and 1")
    n_train, n_val = write_digits(args.outdir, args.val_fraction, args.seed)
    print(f"wrote {args.outdir / 'train.jsonl'} ({n_train} records) and {args.outdir / 'val.jsonl'} ({n_val})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
