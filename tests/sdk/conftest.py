"""The run fixtures (tests/support/run_fixtures.py): a private TRAINCTL_HOME per test, digits data, job files,
process checks."""

from run_fixtures import cleanup_runs, digits_data, digits_job_file, helpers, trainctl_home  # noqa: F401
