"""`sweep status` ranks trials at one step while they run (issue 37 §5: "best" compared one trial's step-23
accuracy with another's step-46)."""

from __future__ import annotations

from trainctl.sweeps.ranking import best_first
from trainctl.sweeps.store import TrialRow


def _row(index: int, state: str, curve: list[tuple[int, float]]) -> TrialRow:
    step, value = curve[-1] if curve else (None, None)
    return TrialRow(index=index, params={"lr": index}, run_id=f"r{index}", state=state, metric=value, step=step)


def test_running_trials_at_different_steps_rank_at_the_step_all_have_reached() -> None:
    curves = {0: [(23, 0.80)], 1: [(23, 0.85), (46, 0.90)], 2: []}
    rows = [_row(i, "running", curves[i]) for i in (0, 1)] + [_row(2, "pending", [])]
    ranked = best_first(rows, "max", curves)
    assert [r.index for r in ranked] == [1, 0, 2]
    assert [(r.compared, r.compared_at) for r in ranked[:2]] == [(0.85, 23), (0.80, 23)]
    assert ranked[2].compared_at is None  # no value yet: last, with nothing compared

    curves = {0: [(23, 0.88)], 1: [(23, 0.85), (46, 0.90)]}  # at step 23 trial 0 leads, though 1 shows 0.90
    ranked = best_first([_row(i, "running", curves[i]) for i in (0, 1)], "max", curves)
    assert [r.index for r in ranked] == [0, 1] and ranked[1].metric == 0.90


def test_finished_trials_and_trials_at_one_step_rank_by_their_values() -> None:
    curves = {0: [(23, 0.88)], 1: [(23, 0.85), (46, 0.90)]}
    ended = best_first([_row(i, "succeeded", curves[i]) for i in (0, 1)], "max", curves)
    assert [r.index for r in ended] == [1, 0] and {r.compared_at for r in ended} == {None}
    level = {0: [(46, 0.3)], 1: [(46, 0.2)]}
    ranked = best_first([_row(i, "running", level[i]) for i in (0, 1)], "min", level)
    assert [r.index for r in ranked] == [1, 0] and {r.compared_at for r in ranked} == {None}
