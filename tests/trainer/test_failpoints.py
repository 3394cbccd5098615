"""Failpoints (trainer/failpoints.py): gofail's term grammar, rank targeting, each action on a real process,
and that an unnamed point does nothing at all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import procs  # tests/support (on sys.path through tests/conftest.py)
import pytest
from trainer import failpoints
from trainer.errors import TrainerInputError

PY = sys.executable


def fires(spec: str, name: str, hits: int) -> list[str | None]:
    """The action each of `hits` hits of `name` runs under `spec` (None: nothing)."""
    point = failpoints.parse(spec)[name][0]
    out = []
    for _ in range(hits):
        term = point.next_term()
        out.append(None if term is None or term.action == "off" else term.action)
    return out


def test_gofail_terms_count_and_chain() -> None:
    assert fires("checkpoint-write=2*off->crash", "checkpoint-write", 4) == [None, None, "crash", "crash"]
    assert fires("compute=1*slow(5)->2*off->hang", "compute", 5) == ["slow", None, None, "hang", "hang"]
    assert fires("compute=2*slow(5)", "compute", 4) == ["slow", "slow", None, None]  # past the chain: off
    point = failpoints.parse("compute=slow(12.5)")["compute"][0]
    assert point.terms[0].ms == 12.5 and point.rank is None


def test_percent_mode_fires_about_that_often() -> None:
    got = fires("compute=30%slow(1)", "compute", 2000)
    assert 0.25 < got.count("slow") / 2000 < 0.35


def test_rank_qualifier() -> None:
    points = failpoints.parse("allreduce@1=hang;allreduce@0=pause")["allreduce"]
    assert [(p.rank, p.terms[0].action) for p in points] == [(1, "hang"), (0, "pause")]


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("checkpiont-write=crash", "POINT one of checkpoint-write"),
        ("compute=explode", "ACTION one of off, slow, hang, pause, crash"),
        ("compute=slow", "slow needs milliseconds"),
        ("compute=crash(3)", "crash takes no value"),
        ("compute@x=crash", "@x is not a rank number"),
        ("compute", "expected POINT[@RANK]=TERMS"),
    ],
)
def test_a_typo_is_refused_with_what_fits(spec: str, says: str) -> None:
    with pytest.raises(TrainerInputError, match=says.replace("[", r"\[").replace("(", r"\(")):
        failpoints.parse(spec)


def _run(code: str, spec: str | None, rank: str = "0", timeout: float = 60) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV}
    env["RANK"] = rank
    if spec is not None:
        env[failpoints.ENV] = spec
    return subprocess.Popen([PY, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


HIT = "from trainer import failpoints; print('active', failpoints.ACTIVE, flush=True); failpoints.hit('{0}'); print('after', flush=True)"


def test_unnamed_is_inert_and_a_bad_variable_is_exit_2(tmp_path: Path) -> None:
    proc = _run(HIT.format("checkpoint-write"), None)
    out, _ = proc.communicate(timeout=60)
    assert out.split() == ["active", "False", "after"]
    proc = _run(HIT.format("checkpoint-write"), "compute=crash")  # another point named: this one does nothing
    assert proc.communicate(timeout=60)[0].split() == ["active", "True", "after"]
    bad = subprocess.run([PY, "-m", "trainer.train", "--train-data", str(tmp_path / "x.jsonl")],
                         env={**os.environ, failpoints.ENV: "compute=boom"}, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "TRAINER_FAILPOINTS" in bad.stderr and "Traceback" not in bad.stderr


def test_crash_is_a_sigkill_at_that_line() -> None:
    proc = _run(HIT.format("checkpoint-write"), "checkpoint-write=crash")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL and "after" not in out
    assert "failpoint checkpoint-write (rank 0, hit 1): crash" in err


def test_only_the_named_rank_fires() -> None:
    proc = _run(HIT.format("compute"), "compute@1=crash", rank="0")
    assert proc.communicate(timeout=60)[0].split()[-1] == "after" and proc.returncode == 0


def test_pause_stops_the_process_until_continued() -> None:
    proc = _run(HIT.format("checkpoint-publish"), "checkpoint-publish=pause")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not procs.stopped(proc.pid):
        time.sleep(0.05)
    assert procs.stopped(proc.pid), procs.state(proc.pid)
    os.kill(proc.pid, signal.SIGCONT)
    assert proc.communicate(timeout=60)[0].split()[-1] == "after"


def test_hang_blocks_the_thread_and_slow_sleeps() -> None:
    code = (
        "import threading, time; from trainer import failpoints\n"
        "t0 = time.monotonic(); failpoints.hit('compute'); print('slow', round(time.monotonic() - t0, 2), flush=True)\n"
        "threading.Thread(target=failpoints.hit, args=('heartbeat',), daemon=True).start()\n"
        "time.sleep(1); print('main thread still runs', flush=True)"
    )
    proc = _run(code, "compute=slow(300);heartbeat=hang")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "main thread still runs" in out, err
    assert 0.3 <= float(out.split()[1]) < 2.0
    assert "failpoint heartbeat (rank 0, hit 1): hang" in err
