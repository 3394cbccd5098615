"""Commands on recorded runs (issue 37, section 5): what they take when no RUN is given, what they say for a run
no one recorded here, and their JSON output. In-process through typer's runner; no engine is asked."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from trainctl.cli import app
from typer.testing import CliRunner


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def test_metrics_without_a_run_is_the_newest_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """As status and logs: `trainctl metrics` alone failed ('Missing argument')."""
    from trainctl import Run
    from trainctl.run_store import RunStore

    store = RunStore()
    store.record(Run(target="local", native_id="old-1", created_at=time.time() - 60), state="succeeded")
    store.record(Run(target="local", native_id="new-2"), state="succeeded")

    def rows(self: Run, lineage: bool = True) -> list[dict[str, Any]]:
        return [{"run": self.id, "step": 10, "loss": 0.5}]

    monkeypatch.setattr(Run, "metrics", rows)
    code, out, err = invoke("metrics", "--output", "json")
    assert code == 0 and [r["run"] for r in json.loads(out)] == ["local:new-2"], err
    code, out, _ = invoke("metrics", "local:old-1", "local:new-2", "--output", "json")
    assert code == 0 and [r["run"] for r in json.loads(out)] == ["local:old-1", "local:new-2"]


def test_metrics_without_any_run_says_there_is_none() -> None:
    code, out, err = invoke("metrics")
    assert code == 2 and out == "" and "no runs yet" in err
