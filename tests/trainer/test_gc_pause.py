"""`gc_pause.paused_gc`: a start with the cyclic collector off, then its objects frozen; and a rank that starts
that way still leaves its model, optimizer and DDP wrapper to the collector that runs before
`destroy_process_group` (training/distributed.py `shutdown`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import clean_env, digits_train_args

PAUSE = """
import gc
from trainer.gc_pause import paused_gc

with paused_gc():
    assert not gc.isenabled()
    kept = [[] for _ in range(5000)]
assert gc.isenabled() and gc.get_freeze_count() >= 5000
assert not any(o is kept[0] for o in gc.get_objects())  # frozen: no collection walks it again
try:
    with paused_gc():
        raise ValueError("in the body")
except ValueError:
    pass
assert gc.isenabled()  # an error restores the collector
gc.disable()
with paused_gc():
    pass
assert not gc.isenabled()  # and a collector that was off stays off
print("ok")
"""


def test_the_collector_is_paused_then_restored_and_what_was_built_is_frozen(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", PAUSE], capture_output=True, text=True, timeout=60,
                          env=clean_env(tmp_path))  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


RANK = """
import gc, sys
import trainer.train as train
import trainer.training.loop as loop

seen = {}
def run(self):
    seen["frozen"] = gc.get_freeze_count()
    tracked = {id(o) for o in gc.get_objects()}
    seen["model collectable"] = id(self.model) in tracked and id(self.optimizer) in tracked
    seen["dynamo frozen"] = id(sys.modules["torch._dynamo"].__dict__) not in tracked
    seen["collector on"] = gc.isenabled()
loop.Trainer.run = run
assert train.main(sys.argv[1:]) == 0
print(seen)
assert seen["frozen"] > 100_000 and seen["dynamo frozen"], seen  # torch and dynamo were imported paused
assert seen["model collectable"] and seen["collector on"], seen  # what the rank builds stays collectable
"""


def test_a_rank_imports_torch_paused_and_its_model_stays_collectable(digits_dir: Path, tmp_path: Path) -> None:
    """One process (no torchrun): `run` is replaced by a probe, so the rank is built and closed, not trained."""
    argv = digits_train_args(digits_dir, tmp_path / "out")[3:]
    proc = subprocess.run([sys.executable, "-c", RANK, *argv], capture_output=True, text=True, timeout=120,
                          env=clean_env(tmp_path))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
