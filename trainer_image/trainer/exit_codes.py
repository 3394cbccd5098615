"""Process exit codes of `trainer-launch` and `python -m trainer.train` (docs/contracts.md).

Schedulers act on these: Kubeflow's `ExitCode` restart policy retries codes >= 128 and treats
1-127 as permanent, so a preemption (retry me) is >= 128 and bad input (never retry) is 2.
"""

EXIT_OK = 0
"""Training finished."""

EXIT_FAILURE = 1
"""Anything unexpected: a crash, a failed collective, a peer that died."""

EXIT_BAD_INPUT = 2
"""Bad config, data, model name or a checkpoint from another model. Retrying will not help."""

EXIT_PREEMPTED = 143
"""A SIGTERM/SIGUSR1 arrived, every rank finished its step and a complete checkpoint was
written before exiting. 143 = 128 + SIGTERM, what shells and Kubernetes already read as
"terminated, may be retried"; rerunning with `resume: auto` continues from that checkpoint."""

EXIT_HANG = 200
"""No step completed within `hang_timeout` (the trainer's watchdog), or a `command:` job's output went
quiet for `hang.quiet_for` (the launcher): the failure record in the output folder names the suspects.
Above 192, so no tool reads it as 128 + a signal number; at least 128, so Kubeflow's ExitCode policy
retries it (a hang is usually a node's fault, not the job's)."""

EXIT_SLOW_NODE = 201
"""`stragglers: exclude` found a node slower than `straggler_factor` x the median: every rank wrote a
checkpoint, the failure record names the node, and a retry without it resumes from that checkpoint."""
