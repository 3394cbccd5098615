"""The code inside the trainctl trainer image: a platform-aware launcher and a DDP/FSDP loop.

It never imports the SDK; the two meet only through the command lines in docs/contracts.md.
"""

__version__ = "0.1.0"
