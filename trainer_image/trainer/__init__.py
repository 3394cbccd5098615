"""The code inside the trainctl trainer image: a platform-aware launcher and a DDP/FSDP loop.

It never imports the SDK; the two meet only through the command lines in docs/contracts.md. Two programs:
the launcher (launch.py, launcher/) and what each worker runs (train.py, training/, data/, checkpoint/); the
modules at the top are what both use (docs/architecture.md "The trainer's layout").
"""

__version__ = "0.1.0"
