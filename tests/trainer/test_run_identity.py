"""Issue 41 in the trainer: the run folder's marker and automatic resume trust the run's uid, never a path.

The real trainer (the launcher, torchrun, gloo) trains a run to its end in one folder; its checkpoint, copied
by hand into another run's folder, is refused by that run's automatic resume, naming both uids, and nothing is
deleted. `--resume-from`'s way in (TRAINCTL_RESUMES_RUN_UID) is accepted; a folder the user named is shared."""

from __future__ import annotations

import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from trainer import identity
from trainer.errors import TrainerInputError

from .conftest import DIGITS_RUN_UID, SharedRun, digits_train_args, launch_cmd, run_folder_env

A, B = "a" * 32, "b" * 32


def test_claim_marks_a_folder_once_and_refuses_another_run(tmp_path: Path) -> None:
    assert identity.claim(tmp_path / "run", A) is True
    assert identity.claim(tmp_path / "run", A) is False  # another node of the same run
    with pytest.raises(TrainerInputError) as refused:
        identity.claim(tmp_path / "run", B)
    assert A in str(refused.value) and B in str(refused.value)
    assert (tmp_path / "run" / identity.MARKER).read_text().strip() == A
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [identity.MARKER]  # no part file left


def test_claims_at_once_from_one_pid_and_host_agree(tmp_path: Path) -> None:
    """Launchers in containers of one node share a pid (1) and a hostname, as threads of this process do; the
    CI run that found it: an srun task's part file was unlinked by its neighbour's claim (ENOENT)."""
    run_dir, start = tmp_path / "run", threading.Barrier(16)

    def claim() -> bool:
        start.wait()
        return identity.claim(run_dir, A)

    for _ in range(20):
        shutil.rmtree(run_dir, ignore_errors=True)
        with ThreadPoolExecutor(16) as pool:
            wrote = list(pool.map(lambda _: claim(), range(16)))
        assert wrote.count(True) == 1
        assert sorted(p.name for p in run_dir.iterdir()) == [identity.MARKER]
        assert (run_dir / identity.MARKER).stat().st_mode & 0o777 == 0o644


def test_check_owner_by_uid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, step = tmp_path / "run", tmp_path / "run" / "checkpoints" / "step-00000010"
    step.mkdir(parents=True)
    monkeypatch.setenv(identity.UID_ENV, B)
    monkeypatch.setenv(identity.RUN_DIR_ENV, str(run_dir))
    identity.check_owner(step, {"run_uid": B}, step.parent)
    for saved in (A, None):
        with pytest.raises(TrainerInputError, match=f"{B}"):
            identity.check_owner(step, {"run_uid": saved}, step.parent)
    assert identity.check_owner(step, {"run_uid": B}, step.parent) is None
    monkeypatch.setenv(identity.RESUMES_ENV, A)  # --resume-from A: its checkpoint (or its lineage's) copied in
    said = identity.check_owner(step, {"run_uid": "c" * 32}, step.parent)
    assert said is not None and f"continues run {A}" in said and "c" * 32 in said
    monkeypatch.setenv(identity.RESUMES_ENV, identity.NO_UID)  # a run recorded before uids
    assert "a run with no uid" in (identity.check_owner(step, {}, step.parent) or "")
    monkeypatch.delenv(identity.RESUMES_ENV)
    identity.check_owner(tmp_path / "mine" / "step-1", {"run_uid": A}, tmp_path / "mine")  # checkpoint.dir: shared
    monkeypatch.delenv(identity.UID_ENV)
    identity.check_owner(step, {"run_uid": A}, step.parent)  # no uid (started by hand, k8s apply): no check


def _train(run_dir: Path, uid: str, data: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    """The launcher on this run folder, 2 gloo processes, the digits model for 1 epoch (as `digits_epoch_run`)."""
    argv = launch_cmd("--nproc-per-node", "2", "--", *digits_train_args(data, run_dir / "output", "--epochs", "1"))
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=run_folder_env(tmp, run_dir, uid),
                          cwd=tmp)  # fmt: skip


@pytest.mark.slow  # two training runs: A (digits_epoch_run, shared with other tests) and B
def test_a_foreign_checkpoint_copied_into_a_run_folder_is_refused(
    digits_epoch_run: SharedRun, tmp_path: Path, digits_dir: Path
) -> None:
    """Run A is the session's `digits_epoch_run` (`_train`'s run, as run DIGITS_RUN_UID, in its own folder);
    run B, here, finds A's newest checkpoint copied into its folder."""
    assert DIGITS_RUN_UID == A
    first = digits_epoch_run.proc
    assert first.returncode == 0, first.stderr[-3000:]
    (newest,) = sorted(digits_epoch_run.ckpt.glob("step-*"))[-1:]
    assert f'"run_uid": "{A}"' in (newest / "meta.json").read_text()
    (tmp_path / "b" / "checkpoints").mkdir(parents=True)
    copied = tmp_path / "b" / "checkpoints" / newest.name
    subprocess.run(["cp", "-a", str(newest), str(copied)], check=True)  # by hand, into run B's folder
    second = _train(tmp_path / "b", B, digits_dir, tmp_path)
    assert second.returncode == 2, second.stderr[-3000:]
    said = second.stderr
    assert f"written by run {A}, not by this run {B}" in said and "Nothing was loaded or deleted" in said, said[-3000:]
    assert copied.is_dir() and (copied / "meta.json").is_file(), "never deleted"
    assert "resumed from" not in said
