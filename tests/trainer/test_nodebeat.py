"""The per-node heartbeat (trainer/nodebeat.py, docs/scale.md): a node's leader sends every local rank's beat in
one multi_set and reads the declaration once; its siblings send nothing while it stamps, and publish themselves
again when it stops. Against a real TCPStore and real files."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
import torch.distributed as dist
from counting_store import Counting  # tests/support
from trainer import nodebeat
from trainer.heartbeat import Beat
from trainer.nodebeat import NodeBoard
from trainer.status import ENV as STATUS_ENV
from trainer.training.hang import DECLARED, HangWatch


def _server() -> dist.TCPStore:
    return dist.TCPStore("127.0.0.1", 0, is_master=True, multi_tenant=True, wait_for_workers=False)


def _client(server: dist.TCPStore) -> Counting:
    store = Counting("127.0.0.1", server.port, "/trainer/attempt_0/watch/", 5.0)
    store.call("check", ["connect"])  # a sibling's first beat went through the store: its connection is open
    store.ops.clear()
    return store


def _beat(rank: int, collectives: int = 40) -> str:
    return Beat(rank, "node1", 100 + rank, 7, 1.0, time.time(), collectives, "step").text()


def test_the_leader_sends_its_nodes_beats_in_one_multi_set_and_the_siblings_send_nothing(tmp_path: Path) -> None:
    server = _server()
    boards = [NodeBoard(tmp_path, rank, leader=rank == 8) for rank in range(8, 16)]
    stores = {board.rank: _client(server) for board in boards}
    for board in boards[1:]:  # before the leader's first stamp: nothing declared, and nothing through the store
        assert board.relay(_beat(board.rank), stores[board.rank], DECLARED, 1.0) == (True, None)
        assert not stores[board.rank].ops
    boards[1].since -= 7.5  # a leader that has not stamped for 7.5 s (5 s store timeout + 2 beats): publish itself
    assert boards[1].relay(_beat(9), stores[9], DECLARED, 1.0) is None
    assert boards[0].relay(_beat(8), stores[8], DECLARED, 1.0) == (True, None)
    assert stores[8].ops == Counter({"multi_set": 1, "check": 1})  # 2 operations for 8 ranks, was 16
    for board in boards[1:]:
        assert board.relay(_beat(board.rank), stores[board.rank], DECLARED, 1.0) == (True, None)
        assert not stores[board.rank].ops  # nothing through the store
    beats = stores[8].beats(16, set(range(8, 16)))  # what the declarer reads: the same keys as before
    assert {r for r, b in beats.items() if b} == set(range(8, 16))
    stores[8].call("set", DECLARED, json.dumps({"rank": 3, "node": "node0"}))
    assert boards[0].relay(_beat(8), stores[8], DECLARED, 1.0) == (True, '{"rank": 3, "node": "node0"}')
    assert boards[5].relay(_beat(13), stores[13], DECLARED, 1.0) == (True, '{"rank": 3, "node": "node0"}')


def _sibling_watch(tmp_path: Path, server: dist.TCPStore) -> tuple[HangWatch, Counting]:
    watch = HangWatch(10, 60, rank=9, world=16, output_dir=tmp_path, backend="gloo", step=0)
    watch.store, watch.board = _client(server), NodeBoard(tmp_path / "board", 9, leader=False)
    assert isinstance(watch.store, Counting)
    return watch, watch.store


def test_a_sibling_publishes_itself_when_its_leader_stops_stamping(tmp_path: Path) -> None:
    server = _server()
    watch, store = _sibling_watch(tmp_path, server)
    leader = NodeBoard(tmp_path / "board", 8, leader=True)
    leader.relay(_beat(8), _client(server), DECLARED, 1.0)
    assert watch._publish(1.0) == (True, None) and not store.ops  # the leader stamps: the board carries the beat
    stamp = tmp_path / "board" / nodebeat.STAMP
    stamp.write_text(json.dumps({**json.loads(stamp.read_text()), "at": time.time() - 7.5}))  # stopped 7.5 s ago
    assert watch._publish(1.0) == (True, None)
    assert store.ops == Counter({"set": 1, "check": 1})  # its own beat and the declaration, as without a board
    assert Beat.parse(_client(server).read("beat/9") or b"") is not None


def test_a_sibling_publishes_itself_when_its_leader_cannot_reach_the_store(tmp_path: Path) -> None:
    server = _server()
    watch, store = _sibling_watch(tmp_path, server)
    stamp = tmp_path / "board" / nodebeat.STAMP
    stamp.write_text(
        json.dumps({"at": time.time(), "published": False, "declared": None, "failing_since": time.time()})
    )
    assert watch._publish(1.0) == (True, None) and not store.ops  # one failed call: its leader tries again
    stamp.write_text(json.dumps({"at": time.time(), "published": False, "failing_since": time.time() - 7.5}))
    assert watch._publish(1.0) == (True, None) and store.ops == Counter({"set": 1, "check": 1})


def test_a_sibling_opens_no_store_connection_while_its_leader_stamps(tmp_path: Path) -> None:
    """One connection per node, not per rank: the store's event loop pays a reverse DNS lookup for each
    (nodebeat.py); the sibling connects when it must publish itself."""
    server = _server()
    watch = HangWatch(10, 60, rank=9, world=16, output_dir=tmp_path, backend="gloo", step=0)
    watch.store = Counting("127.0.0.1", server.port, "/trainer/attempt_0/watch/", 5.0)
    watch.board = NodeBoard(tmp_path / "board", 9, leader=False)
    assert watch._publish(1.0) == (True, None)  # before the leader's first stamp too
    NodeBoard(tmp_path / "board", 8, leader=True).relay(_beat(8), _client(server), DECLARED, 1.0)
    assert watch._publish(1.0) == (True, None) and not watch.store.ops and not watch.store.connected
    assert not watch._may_declare()  # its leader declares on the same stall clock


def test_the_leader_sends_its_siblings_answers_to_the_roll_call(tmp_path: Path) -> None:
    """In a hang a sibling without a connection answers on the board; its leader sends the node's answers in
    3 store operations and says which it sent; a sibling whose answer was not sent sees so."""
    server = _server()
    leader, store = NodeBoard(tmp_path, 8, leader=True, local_world=4), _client(server)
    siblings = [NodeBoard(tmp_path, rank, leader=False) for rank in (9, 10, 11)]
    for board in siblings[:2]:
        board.answer(_beat(board.rank))
    sent = leader.relay_answers(store, time.monotonic() + 0.6, "rollcall_ranks", "rollcall_answers")
    assert sent == {9, 10} and store.ops == Counter({"multi_set": 1, "append": 1, "add": 1})
    assert store.call("add", "rollcall_answers", 0) == 2 and store.read("rollcall_ranks") == b"9,10,"
    assert {r for r, b in store.beats(16, {9, 10}).items() if b} == {9, 10}  # what the declarer's diagnose reads
    assert siblings[0].relayed(time.monotonic()) and not siblings[2].relayed(time.monotonic() + 0.3)
    siblings[0].wait_reported(time.monotonic() + 0.3)  # bounded: no record yet
    leader.mark_reported()
    assert (tmp_path / nodebeat.REPORTED).exists()


@pytest.mark.parametrize(
    ("world", "local", "forced", "on"),
    [
        (64, "8", None, True),
        (63, "8", None, False),
        (4, "2", "1", True),
        (512, "8", "0", False),
        (64, "1", None, False),
    ],
)
def test_the_board_is_used_from_64_ranks_with_more_than_one_a_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, world: int, local: str, forced: str | None, on: bool
) -> None:
    monkeypatch.setenv(STATUS_ENV, str(tmp_path / "status.json"))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    if forced is None:
        monkeypatch.delenv(nodebeat.ENV, raising=False)
    else:
        monkeypatch.setenv(nodebeat.ENV, forced)
    board = NodeBoard.from_env(rank=11, world=world)
    assert (board is not None) == on
    if board is not None:
        assert board.folder == tmp_path / "nodebeat-2" and not board.leader  # per attempt, beside the status file


def test_the_roll_call_waits_one_beat_more_with_a_board(tmp_path: Path) -> None:
    """A sibling sees the declaration one leader's beat after the store has it: the declarer waits that long more."""
    watch = HangWatch(10, 60, rank=0, world=16, output_dir=tmp_path, backend="gloo", step=0)
    assert watch._roll_call_s(10.0) == 5.0  # 3 s + 2 beats of 1 s, as before
    watch.board = NodeBoard(tmp_path / "board", 0, leader=True)
    assert watch._roll_call_s(10.0) == 6.0 and watch._roll_call_s(100.0) == 33.0
