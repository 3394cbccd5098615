"""The rules behind hang and slow-node reports, as functions: the hang deadline's formula, who is a
suspect (heartbeat.diagnose), which node is slow (stragglers.judge), and how status reads the records."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainctl.runs import records as run_records
from trainer import records
from trainer.heartbeat import Beat, diagnose
from trainer.training.hang import HangWatch, hang_deadline
from trainer.training.stragglers import judge


def test_explicit_hang_timeout_after_the_first_step() -> None:
    assert hang_deadline(20, 1800, [], steps_done=0)[0] == 300  # the first step gets the warm-up allowance
    assert hang_deadline(400, 1800, [], steps_done=0)[0] == 400
    assert hang_deadline(20, 1800, [0.1], steps_done=1) == (20.0, "trainer.hang_timeout")


@pytest.mark.parametrize(
    ("timeout_s", "gaps", "steps", "expected"),
    [
        (1800, [0.05] * 50, 5, 300.0),  # warm-up
        (1800, [0.05] * 50, 50, 60.0),  # the floor
        (1800, [0.05] * 49 + [12.0], 50, 120.0),  # 10 x the slowest
        (1800, [0.05] * 49 + [500.0], 50, 1440.0),  # never above 0.8 x timeout_s
        (60, [0.05] * 50, 50, 48.0),
        (10, [0.05] * 50, 5, 8.0),
    ],
)
def test_adaptive_hang_timeout(timeout_s: int, gaps: list[float], steps: int, expected: float) -> None:
    limit, rule = hang_deadline(None, timeout_s, gaps, steps)
    assert limit == pytest.approx(expected) and rule


def beat(rank: int, node: str, at: float, collectives: int) -> Beat:
    return Beat(rank, node, 100 + rank, step=57, step_at=at - 10, at=at, collectives=collectives, phase="step")


def test_a_silent_rank_is_the_suspect() -> None:
    now = 1000.0
    beats = {0: beat(0, "n1", now - 0.5, 230), 1: beat(1, "n2", now - 11.2, 229)}
    (suspect,) = diagnose(beats, answered={0}, world=2, now=now)
    assert (suspect.node, suspect.rank, suspect.heartbeat_age_s) == ("n2", 1, 11.2)
    assert "no answer to the roll call" in suspect.why


def test_a_live_rank_that_never_joined_the_collective_is_the_suspect() -> None:
    now = 1000.0
    beats = {0: beat(0, "n1", now, 231), 1: beat(1, "n1", now, 230), 2: beat(2, "n2", now, 231)}
    (suspect,) = diagnose(beats, answered={0, 1, 2}, world=3, now=now)
    assert suspect.rank == 1 and "issued 230 collectives, the others 231" in suspect.why


def test_a_rank_that_beat_during_the_stall_but_answered_late_is_not_a_suspect() -> None:
    """At 2,048 stand-in ranks on 2 cores, starved ranks missed the roll call with beats 4-5 s old: alive while the
    others waited (a stall of 11 s; the stopped rank went quiet 16 s ago), they did not stop the collective."""
    from trainer.heartbeat import late_ranks

    now = 1000.0
    alive_after = now - 5.0 - 11.0 / 2  # declared 5 s ago (the roll call), a stall of 11 s
    beats = {0: beat(0, "n1", now - 0.5, 230), 1: beat(1, "n2", now - 16.2, 229), 2: beat(2, "n3", now - 4.4, 230)}
    assert late_ranks(beats, {0}, 3, alive_after) == [2] and late_ranks(beats, {0}, 3, None) == []
    (suspect,) = diagnose(beats, answered={0}, world=3, now=now, late=late_ranks(beats, {0}, 3, alive_after))
    assert (suspect.node, suspect.rank) == ("n2", 1)
    assert [s.rank for s in diagnose(beats, answered={0}, world=3, now=now)] == [1, 2]  # no stall known: both
    only_late = {0: beats[0], 1: beat(1, "n2", now - 4.4, 230)}  # no other suspect: the late rank is named
    (fallback,) = diagnose(only_late, answered={0}, world=2, now=now, late=late_ranks(only_late, {0}, 2, alive_after))
    assert fallback.rank == 1 and "though it beat 4.4 s ago, during the stall" in fallback.why


def test_no_suspect_when_all_answer_at_the_same_collective() -> None:
    now = 1000.0
    beats = {r: beat(r, f"n{r}", now, 99) for r in range(3)}
    assert diagnose(beats, answered={0, 1, 2}, world=3, now=now) == []
    (never,) = diagnose({0: beats[0]}, answered={0}, world=2, now=now)
    assert never.rank == 1 and "never published" in never.why


def test_judge_names_the_slow_node_with_its_ratio() -> None:
    (slow,) = judge([0.005, 0.0251], ["n1", "n2"], factor=2.0)  # two nodes: compared with the other one
    assert (slow.node, slow.rank, slow.ratio) == ("n2", 1, 5.02)
    assert judge([0.005, 0.009], ["n1", "n2"], factor=2.0) == []
    # 2 nodes x 2 ranks, one slow rank: its node, that rank
    (slow,) = judge([0.005, 0.0052, 0.0049, 0.02], ["n1", "n1", "n2", "n2"], factor=1.5)
    assert (slow.node, slow.rank) == ("n2", 3)
    # a whole slow node among three
    slow_nodes = judge([0.005, 0.005, 0.02, 0.021, 0.005, 0.005], ["a", "a", "b", "b", "c", "c"], factor=2.0)
    assert [(s.node, s.rank) for s in slow_nodes] == [("b", 3)]


def test_sdk_reads_the_record_names_the_trainer_writes() -> None:
    assert (run_records.FAILURE, run_records.SLOW_NODES) == (records.FAILURE, records.SLOW_NODES)
    data = {"nodes": [{"node": "n3", "rank": 2, "ratio": 2.5, "first_step": 20, "last_step": 40},
                      {"node": "n2", "rank": 1, "ratio": 4.8, "first_step": 20, "last_step": 60}]}  # fmt: skip
    assert [n.node for n in run_records.slow_nodes(data)] == ["n2", "n3"]
    assert run_records.slow_node_line(run_records.slow_nodes(data)[0]) == (
        "n2 (rank 1): 4.8x the median compute time (steps 20-60)"
    )
    failure = run_records.failure(
        {"kind": "hang", "step": 5, "suspects": [{"node": "n2", "rank": 1, "why": "w"}], "x": 1}
    )
    assert failure is not None and failure.model_dump(exclude_none=True) == {
        "kind": "hang", "step": 5, "suspects": [{"node": "n2", "rank": 1, "why": "w"}]
    }  # fmt: skip
    assert run_records.failure_line(failure) == "hang at step 5: suspect n2 rank 1 (w)"


def test_a_long_phase_gets_ten_times_its_longest_run_or_the_warm_up_allowance(tmp_path: Path) -> None:
    watch = HangWatch(8, 60, rank=0, world=2, output_dir=tmp_path, backend="gloo", step=0)
    watch.steps_done = 50
    assert watch.deadline() == (8.0, "trainer.hang_timeout")
    watch.phase, watch.longest = "checkpoint", {"checkpoint": 0.05, "evaluate": 2.0}
    assert watch.deadline()[0] == 8.0  # a 50 ms save: the step deadline holds inside it too
    watch.phase = "evaluate"
    assert watch.deadline()[0] == 20.0  # 10 x its longest run
    watch.phase = "finish"
    assert watch.deadline() == (48.0, "inside finish: its first finish: 300 s, at most 0.8 x timeout_s")


def test_the_termination_message_fits_kubelets_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compact record stays within the 4096 bytes kubelet keeps (it keeps the tail: a longer one would not
    parse), dropping suspects from the end and counting them; it is written beside failure.json only where
    the pod names the file, and only by the verdict that stands (replace=False keeps the first)."""
    import json

    suspects = [{"node": f"node-{i:03d}" * 8, "rank": i, "heartbeat_age_s": 9.5, "why": "x" * 200} for i in range(80)]
    record = {"kind": "hang", "source": "trainer", "time": 1.0, "step": 31, "exit_code": 200, "suspects": suspects,
              "ranks": [{"rank": i} for i in range(500)]}  # fmt: skip
    text = records.compact(record)
    found = json.loads(text)
    assert len(text.encode()) <= records.TERMINATION_LIMIT and found["kind"] == "hang" and found["step"] == 31
    kept = len(found["suspects"])
    assert 0 < kept < 80 and found["suspects_left_out"] == 80 - kept
    assert found["suspects"][0] == {"node": "node-000" * 8, "rank": 0, "heartbeat_age_s": 9.5}
    message = tmp_path / "termination-log"
    monkeypatch.delenv(records.TERMINATION_LOG_ENV, raising=False)
    assert records.write_failure(tmp_path / "out", record) and not message.exists()
    monkeypatch.setenv(records.TERMINATION_LOG_ENV, str(message))
    assert not records.write_failure(tmp_path / "out", {**record, "step": 99}, replace=False)
    assert not message.exists()  # another rank's verdict stands: this one says nothing
    assert records.write_failure(tmp_path / "out", record) and json.loads(message.read_text()) == found
