"""The job's parts, as pure data: the spec (job_spec.py), its sections, and how a job file is read and checked.
Nothing here does I/O beyond reading the job file; every target renders from these."""
