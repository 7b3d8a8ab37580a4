"""Torch threads of the in-process CPU engines (the generation and the embedding engine)."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

# Every CPU the process may run on. During a batch the API and the scheduler are idle, and on 2 cores two
# threads ran the prefix file 1.33x faster than one (BENCHMARKS.md, CPU engine).
DEFAULT_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch ops in this block run on one thread, so they start no OpenMP team in the calling thread.

    The worker loads its engine in the main thread and runs it in a rank thread. Once
    two threads have each run a parallel region, OpenMP (libgomp) manages more threads
    than there are CPUs and stops spinning between regions: every op then waits tens
    of microseconds for the team's threads to wake. Measured on 2 cores: an add
    7.6 -> 67 us, the longgen file through the engine 41.3 -> 51.2 s (BENCHMARKS.md,
    CPU engine). An engine loads under this and sets its own threads in the thread that steps.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
