"""Keep the cyclic garbage collector off what a role's process builds at start-up.

Before it serves, a role imports SQLAlchemy, FastAPI, numpy, the tokenizer side
and (the workers) torch: some 130,000-260,000 objects that the GC tracks and
that live as long as the process. A full collection walks all of them with the
GIL held, stopping every thread of the process: in a 64-rank echo run on 2 busy
cores (gc.callbacks probe; BENCHMARKS.md, Control plane) each worker
process's full collections took 0.1-0.8 s of wall time, and a rank whose claim
or result hand-off fell into one waited for all of it. Measured alone, such a
process tracks ~350,000 objects and a full collection costs 0.25 CPU-s; after
the freeze, next to nothing.

`gc.freeze()` moves every object alive at that moment into the permanent
generation, which collections skip; objects made later are collected as usual.
Start-up garbage is collected first, so none is kept for good.
"""
from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Collect, then exempt everything alive now from future collections. Call once, when start-up is done."""
    gc.collect()
    gc.freeze()
