"""What a run is and what it left: its state and record (state.py, records.py), the run store, its progress,
metrics and causes of failure. Pure data and reads of a run's files; no target code."""
