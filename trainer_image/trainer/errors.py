"""Errors a user can fix. They become one clear message and exit code 2, never a traceback."""

from __future__ import annotations


class TrainerInputError(Exception):
    """Bad config, data, model or checkpoint: says what is wrong and where, e.g. `file:line`."""


class CheckpointCorrupt(Exception):
    """A checkpoint directory that cannot be read back; resume skips it for an older one."""


class Preempted(Exception):
    """A stop signal arrived and every rank's checkpoint is complete; the message is its path."""
