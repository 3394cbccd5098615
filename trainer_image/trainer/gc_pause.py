"""A process's start with Python's cyclic garbage collector paused, then what it built frozen.

Importing torch, and dynamo (which DDP's constructor imports), makes hundreds of thousands of objects that live as
long as the process. With the collector on, every 700 new ones start a collection, and the older generations are
walked again and again as they grow: `import torch._dynamo` took 1.3-1.6 CPU-s here with the collector on and
0.9-1.1 paused (docs/benchmarks.md section 6), in every rank and on every start, retry and resume. After the start,
`gc.freeze()` moves it all to the permanent generation, so no later collection walks it (CPython's advice for
long-lived start-up state, Doc/library/gc.rst `freeze`): the compile and the loop's collections, and the full one
before `destroy_process_group` (training/distributed.py), only walk what the run made since.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """The body with the cyclic collector off; after it, everything alive is frozen and the collector is as before.
    An error in the body restores the collector too."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_on:
            gc.enable()
