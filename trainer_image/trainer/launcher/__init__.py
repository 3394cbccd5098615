"""The launcher's own parts (trainer/launch.py is its entry): the launch plan and modes, the platform's
variables, staging data, privileges, teardown, and what it watches while the workers run."""
