"""A small decoder-only transformer for the GPU tests and figures: `model: trainer.examples.transformer:build`.

`python -m trainer.examples.transformer OUTDIR [--records N] [--seq 64] [--vocab 64] [--tokens]` writes
`train.jsonl` and `val.jsonl` of a task it can learn: `x` is `seq` random token ids, `y` the first of
them, which the last position reaches only through causal attention. `--tokens` writes the same samples as
token shards, `train.bin` and `val.bin` (trainer/data/tokens.py: memory-mapped uint16, no JSON to parse). The
model reads the ids (float in JSONL, as the loader gives every `x`; int64 from shards), runs pre-norm blocks with
`scaled_dot_product_attention(is_causal=True)` (flash attention on a GPU) and classifies from the
last position: the trainer's classification loss, so no change to the loop.

Its size comes from `model_args` (`vocab`, `seq`, `dim`, `layers`, `heads`): the defaults are the
~100M-parameter model bench/gpu.py times (GPT-2 small's 12 x 768 with an 8,192-token vocabulary).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

DEFAULTS: dict[str, int] = {"vocab": 8192, "seq": 512, "dim": 768, "layers": 12, "heads": 12}


class Block(nn.Module):
    """Pre-norm attention and a 4x GELU MLP, each with a residual."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        q, k, v = self.qkv(self.norm1(h)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return h + self.mlp(self.norm2(h))


class TokenClassifier(nn.Module):
    """Token and position embeddings, `layers` blocks, a final norm, and a head on the last position."""

    def __init__(self, vocab: int, seq: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)
        self.index: torch.Tensor
        self.register_buffer("index", torch.arange(seq), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ids = x.long()
        h = self.tokens(ids) + self.positions(self.index[: ids.shape[1]])
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h[:, -1]))


def sizes(args: dict[str, Any]) -> dict[str, int]:
    unknown = set(args) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown model_args {sorted(unknown)}: expected some of {sorted(DEFAULTS)}")
    return {**DEFAULTS, **{k: int(v) for k, v in args.items()}}


def build(config: Any) -> nn.Module:
    """The trainer's `package.module:build_fn` entry: the size from `config.model_args`."""
    return TokenClassifier(**sizes(config.model_args))


def train_flops_per_sample(args: dict[str, Any]) -> float:
    """Forward + backward FLOPs of one sample (PaLM's appendix B count: 6 per weight per token for the
    blocks, 12 x layers x dim x seq per token for attention, the head on one position per sample)."""
    s = sizes(args)
    dim, seq, layers = s["dim"], s["seq"], s["layers"]
    block_weights = layers * 12 * dim * dim
    return seq * (6 * block_weights + 12 * layers * dim * seq) + 6 * dim * s["vocab"]


def write_copy_task(
    outdir: Path, records: int, seq: int, vocab: int, seed: int = 0, val: int = 512, tokens: bool = False
) -> None:
    """`train.jsonl` (`records` lines) and `val.jsonl` (`val` lines): random ids, label the first; with
    `tokens`, the same samples as `train.bin` and `val.bin` token shards (`x` then `y`, seq + 1 ids each)."""
    from ..data.tokens import write_shard

    rng = np.random.default_rng(seed)
    outdir.mkdir(parents=True, exist_ok=True)
    for name, count in (("train", records), ("val", val)):
        ids = rng.integers(0, vocab, size=(count, seq))
        if tokens:
            write_shard(outdir / f"{name}.bin", np.concatenate([ids, ids[:, :1]], axis=1).reshape(-1), seq + 1)
            continue
        with open(outdir / f"{name}.jsonl", "w") as fh:
            fh.writelines(json.dumps({"x": row.tolist(), "y": int(row[0])}) + "\n" for row in ids)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.examples.transformer", description=__doc__)
    p.add_argument("outdir", type=Path)
    p.add_argument("--records", type=int, default=4096)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokens", action="store_true", help="token shards (train.bin, val.bin) instead of JSONL")
    args = p.parse_args(argv)
    write_copy_task(args.outdir, args.records, args.seq, args.vocab, args.seed, tokens=args.tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
