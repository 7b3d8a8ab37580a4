"""One stream of the CPU engine as the driver's adapter (blendserve/worker/engines/driver.py).

The scheduler decides admission inside a step: a batch request goes in only where the step's budget left
after the running sequences, the running cap and the free KV blocks hold its first chunk, and only then is
the next one read (``Scheduler._admit`` calls ``pull``). So this adapter pulls from the driver's feed
(``pulls``) instead of answering ``room``; order and the no-read-ahead rule are the scheduler's, as before.
Interactive requests come from the driver before each step and, between two layers of a step, from the
feed itself (``cut_in``): their prompt runs then, so their first token waits for one layer, not a step.
A request whose own work raises (its admission here, its sampling or token callback in the engine's step,
its result's text) fails alone: its other choices leave the engine and it gets an error result.
A request whose grammar still compiles waits outside the steps (grammar.py's ``Held``) and joins when it
is ready, or fails alone when it cannot be.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Protocol

from blendserve.worker.engines.base import GenRequest, GenResult
from blendserve.worker.engines.cpu.grammar import Held
from blendserve.worker.engines.cpu.scheduler import Scheduler, Sequence
from blendserve.worker.engines.driver import Feed, add, failure


class StepEngine(Protocol):
    """What the adapter uses of the CPU engine (blendserve/worker/engines/cpu/engine.py): its pool, caps and
    model step, named here so the engine module imports the adapter and not the other way round."""
    blocks: Any
    max_running: int
    step_tokens: int
    spec: Any
    rush_tokens: int
    cut_in: bool
    results: Any
    failed: dict[int, Exception]
    _sched: Scheduler | None

    def _draft(self, seq: Sequence, most: int) -> list[int]: ...
    def _sequence(self, request: GenRequest) -> Sequence: ...
    def _run(self, sched: Scheduler, step: Any, between: Any = None) -> list[Sequence]: ...

# While interactive requests arrived in the last RUSH_WINDOW_S, a step carries at most
# ``rush_tokens`` (BLENDSERVE_CPU_RUSH_TOKENS) of batch work, decodes and prefill together (the
# oldest sequences first; the rest keep their blocks and wait). Since a new interactive prompt cuts
# in between two layers of the step in flight, the cap does not set its time to first token; it sets
# the time between its tokens (each rides in a batch step) against the batch's speed. A cap of 256
# keeps every running batch sequence decoding and only holds back big prefill chunks: with a
# 2,000-request batch and chats at 1/s, the batch kept ~1.0 of its solo speed at 256 and 0.62 at 96,
# chats' first token within 1.1-1.3x of idle either way, their 24 tokens in ~4.9 s at 256 and ~2.5 s
# at 96 (BENCHMARKS.md, interactive latency). The window covers the gaps of a steady trickle (1/s).
RUSH_WINDOW_S = 10.0


class CpuCore:
    """The CPU engine's scheduler for one stream: sequences, not requests, run; results come per request."""

    sweep_s = 0.0
    pulls = True

    def __init__(self, engine: StepEngine) -> None:
        self.engine = engine
        self.sched = engine._sched = Scheduler(engine.blocks, engine.max_running, engine.step_tokens,
                                               engine._draft if engine.spec.on else None, engine.spec.max_running)
        self.ready: list[Sequence] = []       # finished without running (nothing to generate)
        self.admitted: list[Sequence] = []    # interactive sequences admitted since the last cut-in
        self.last_urgent = -RUSH_WINDOW_S
        self.held = Held()                    # waiting for their grammar's compile, in no step

    def room(self) -> bool:
        return False

    def fits(self, request: GenRequest) -> bool:
        return False

    def add(self, request: GenRequest, urgent: bool) -> None:
        """An interactive request (batch requests are pulled by the scheduler): into the running set now."""
        self.last_urgent = time.monotonic()
        seq = self.engine._sequence(request)
        if seq.finish_reason is None and self.held.hold(seq, urgent=True):
            return
        if seq.finish_reason is None:
            self.sched.admit_urgent(seq)
            self.admitted.append(seq)
        else:
            self.ready.append(seq)

    def abort(self, keys: list[int]) -> None:
        gone = set(keys)
        self.held.drop(gone)
        for seq in [*self.sched.running, *self.sched.waiting]:
            if seq.key in gone:
                self.sched.finish(seq)        # dropped without a result, as the interface says

    def busy(self) -> bool:
        return self.sched.has_work() or bool(self.ready) or bool(self.held)

    def step(self, feed: Feed) -> Iterator[GenResult]:
        sched = self.sched
        self.admitted = []
        yield from self.held.join(self)
        rush = time.monotonic() - self.last_urgent < RUSH_WINDOW_S or any(s.urgent for s in sched.running)
        sched.batch_cap = self.engine.rush_tokens if rush else None
        step = sched.schedule(lambda: self._pull(feed))
        done = step.finished
        if step.chunks:
            cut = (lambda: self._cut_in(feed)) if feed.interactive and self.engine.cut_in else None
            done += self.engine._run(sched, step, cut)
        done += self.ready
        self.ready = []
        for seq in done:
            if (result := self._result(seq)) is not None:
                yield result

    def close(self) -> None:
        self.held.seqs = []
        for seq in [*self.sched.running, *self.sched.waiting]:
            self.sched.finish(seq)

    def _result(self, seq: Sequence) -> GenResult | None:
        """The finished sequence's request's result (None while other choices run), or its error result
        where its own work raised: its other choices are dropped then."""
        error = self.engine.failed.pop(seq.key, None)
        if error is None:
            try:
                return self.engine.results.of(seq)
            except Exception as e:
                error = e
        self.abort([seq.key])
        self.engine.results.choices.pop(seq.key, None)
        return failure(seq.key, error, seq.prompt_len)

    def _pull(self, feed: Feed) -> Sequence | None:
        """The scheduler has room for one more: the next request of the plan that has something to run."""
        while (request := feed.next()) is not None:
            try:
                seq = self.engine._sequence(request)
            except Exception as e:            # refused or raised at admission: it fails alone
                feed.fail(request, e)
                continue
            if seq.finish_reason is None and self.held.hold(seq, urgent=False):
                if len(self.held) >= self.engine.max_running:
                    return None               # no further read-ahead while that many wait for a grammar
                continue
            if seq.finish_reason is None:
                return seq
            self.ready.append(seq)
        return None

    def _cut_in(self, feed: Feed) -> None:
        """Between two layers of a step: interactive requests that arrived meanwhile run their prompt now,
        so their first token waits for one layer of the step in flight, not for all of it."""
        self.admitted = []
        for request in feed.urgent():
            add(self, feed, request, urgent=True)
        if self.admitted and (step := self.sched.cut_in(self.admitted)).chunks:
            self.ready.extend(self.engine._run(self.sched, step))
