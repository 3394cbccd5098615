"""The hang report's store traffic (docs/scale.md): the roll call reads one answer counter while it waits and
who answered in one read of the appended list; the answered ranks' beats come in one multi_get. Against a
real TCPStore."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import torch.distributed as dist
from counting_store import Counting  # tests/support
from trainer.heartbeat import Beat
from trainer.training.hang import ANSWERED, ANSWERS, HangWatch


def _store() -> tuple[dist.TCPStore, Counting]:
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, multi_tenant=True, wait_for_workers=False)
    return server, Counting("127.0.0.1", server.port, "/trainer/attempt_0/watch/", 5.0)


def _beat(rank: int) -> str:
    return Beat(rank, f"n{rank}", 100 + rank, 7, 1.0, 2.0, 40, "step").text()


def test_beats_of_answered_ranks_in_one_multi_get_the_rest_one_by_one() -> None:
    _server, store = _store()  # the server lives as long as the test
    for rank in (0, 2, 3):
        store.call("set", f"beat/{rank}", _beat(rank))
    store.ops.clear()
    beats = store.beats(5, {0, 2})
    assert {r: b.pid if b else None for r, b in beats.items()} == {0: 100, 2: 102, 1: None, 3: 103, 4: None}
    assert store.ops == Counter({"multi_get": 1, "check": 3, "get": 1})  # ranks 1, 3, 4 read one by one


def test_roll_call_polls_the_counter_and_reads_the_answers_once(tmp_path: Path) -> None:
    _server, store = _store()  # the server lives as long as the test
    watch = HangWatch(5, 60, rank=0, world=4, output_dir=tmp_path, backend="gloo", step=0)
    watch.store = store
    for rank in (0, 1, 3):
        store.call("append", ANSWERED, f"{rank},")
        store.call("add", ANSWERS, 1)
    store.ops.clear()
    t0 = time.monotonic()
    assert watch._roll_call(wait_s=1.0) == {0, 1, 3}  # rank 2 never answers: the whole wait
    assert time.monotonic() - t0 >= 1.0
    # who answered: one check and one get whatever the world (a key per rank was N checks); the counter ~5 x a second
    assert (store.ops["check"], store.ops["get"]) == (1, 1) and 3 <= store.ops["add"] <= 7
    store.call("add", ANSWERS, 1)
    store.call("append", ANSWERED, "2,")
    t0 = time.monotonic()
    assert watch._roll_call(wait_s=5.0) == {0, 1, 2, 3}
    assert time.monotonic() - t0 < 1.0  # every rank answered: no wait
