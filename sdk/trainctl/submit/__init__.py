"""What `submit` does around the engine: checks first (submit/preflight.py), the code bundle, the tracker run,
resuming another run, and the one path that records a run (submit/runner.py)."""
