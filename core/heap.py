"""Keep the cyclic garbage collector off what a role's process builds at start-up.

Before it serves, a role imports SQLAlchemy, FastAPI, numpy, the tokenizer side
and (the workers) torch: 130,000-260,000 objects that the GC tracks and that live
as long as the process. Every full collection walked all of them with the GIL
held, stopping every thread of the process: in a 64-rank echo run each worker
process (16 ranks) spent about 4 s of wall time in 9 full collections, about
0.45 s each, and the leading scheduler 5 s in 14 (measured with gc.callbacks;
BENCHMARKS.md, control plane session 15). A rank whose claim or result write
fell into one waited for all of it.

`gc.freeze()` moves every object alive at that moment into the permanent
generation, which collections skip; objects made later are collected as before.
Start-up garbage is collected first, so none is kept for good.
"""
from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Collect, then exempt everything alive now from future collections. Call once, when start-up is done."""
    gc.collect()
    gc.freeze()
