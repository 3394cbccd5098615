"""Sweeps (docs/sweeps.md): a job plus a search space, run as one unit on a target, one run per trial.

`spec/sweep.py` (a leaf) holds the search space as data; here: the sweep's files (store.py), the trial
jobs (trials.py), the metric a trial reached (metric.py), the median rule (median.py), the detached
driver that keeps at most P trials running (driver.py), a search the engine runs itself (search.py: bayesian,
one SageMaker tuning job) and the handle users hold (handle.py).
"""
