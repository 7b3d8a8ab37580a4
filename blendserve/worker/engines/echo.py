"""An engine stand-in for control-plane load tests: timing of a real engine, no model.

It exercises every line of the worker except the forward pass, so a small
machine can run dozens of ranks against one database and measure claims,
heartbeats, result writes and planning at cluster rates. It is never a
serving engine: replies are filler text of the requested length.

Timing model: a running set of at most ``max_running`` sequences; each takes
its uncached prompt tokens at ``prefill_tokens_per_s`` and then emits tokens at
``tokens_per_s`` (each request's rate drawn around it, lognormal with sigma 0.2,
seeded), the way one GPU's continuous batching serves a steady batch.
``cached_tokens`` come from a prefix model: 16-token blocks keyed by a hash of
everything before them, least recently used evicted past ``cache_tokens``.

Cheap per result, since 16 ranks share one process's GIL in a load test: block
keys chain Python's tuple hash (not a cryptographic digest of each block's
text), and cancellations are checked only when the caller's `cancel_epoch` moved
since the last check (the driver's rule, blendserve/worker/engines/driver.py: nothing
was cancelled in most steps of a run, and 64 ranks x 256 running x 20 steps/s made
330,000 `cancelled` calls a second), or once a step (STEP_S) without one.
"""
from __future__ import annotations

import heapq
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator

from blendserve.core.engine_settings import EchoSettings
from blendserve.worker.engines.base import EngineStats, GenRequest, GenResult
from blendserve.worker.engines.driver import CoreDefaults, Feed, Tokens, drive

log = logging.getLogger("blendserve.worker")

BLOCK = 16
REPORT_S = 10.0        # how often each engine logs the CPU its own simulation has used (control-plane benchmark)
STEP_S = 0.05          # a "step": how often running requests are checked for cancellation
FILLER = 1000          # the token id every reply is made of ("x" in the text)


class _PrefixModel:
    """Which 16-token prompt blocks a prefix cache would still hold."""

    def __init__(self, capacity_tokens: int) -> None:
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self.capacity = max(capacity_tokens // BLOCK, 1)

    def lookup_and_insert(self, ids: list[int]) -> int:
        key, cached, hit = 0, 0, True
        for i in range(0, len(ids) - len(ids) % BLOCK, BLOCK):
            key = hash((key, *ids[i:i + BLOCK]))        # the block and everything before it (64 bits)
            if hit and key in self.blocks:
                cached += BLOCK
                self.blocks.move_to_end(key)
            else:
                hit = False
                self.blocks[key] = None
                if len(self.blocks) > self.capacity:
                    self.blocks.popitem(last=False)
        return min(cached, len(ids) - 1) if cached else 0


class _EchoCore(CoreDefaults):
    """One stream on the echo engine: a heap of running requests by finish time."""

    sweep_s = STEP_S

    def __init__(self, engine: EchoEngine) -> None:
        self.engine = engine
        self.running: list[tuple[float, int, GenResult]] = []      # (finish time, tie-break, result)
        engine._running = self.running
        self.streamed: set[int] = set()       # interactive keys: their tokens go out with their result
        self.n = 0

    def room(self) -> bool:
        return len(self.running) < self.engine.max_running

    def add(self, request: GenRequest, urgent: bool) -> None:
        t0 = time.thread_time()
        self.n += 1
        res = self.engine._result(request)
        heapq.heappush(self.running, (self.engine._finish_at(request, res), self.n, res))
        if request.on_tokens is not None:
            self.streamed.add(request.key)
        self.engine.spent(time.thread_time() - t0)

    def abort(self, keys: list[int]) -> None:
        gone = set(keys)
        self.running[:] = [r for r in self.running if r[2].key not in gone]
        heapq.heapify(self.running)

    def busy(self) -> bool:
        return bool(self.running)

    def step(self, feed: Feed) -> Iterator[GenResult | Tokens]:
        """Wait for the next finish, at most STEP_S (cancellations land within 50 ms); what finished."""
        t0 = time.thread_time()         # the wake-up counts too: a thread's CPU, never the time it slept
        wait = self.running[0][0] - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, STEP_S))
        while self.running and self.running[0][0] <= time.monotonic():
            res = heapq.heappop(self.running)[2]
            self.engine.spent(time.thread_time() - t0)     # not the caller's work between the yields
            if res.key in self.streamed:
                self.streamed.discard(res.key)
                yield Tokens(res.key, res.output_ids)
            yield res
            t0 = time.thread_time()
        self.engine.spent(time.thread_time() - t0)

    def close(self) -> None:
        self.running.clear()
        self.engine.spent(0.0, report=True)


class EchoEngine:
    def __init__(self, model_name: str, *, tokens_per_s: float | None = None,
                 prefill_tokens_per_s: float | None = None, max_running: int | None = None,
                 cache_tokens: int | None = None, seed: int = 0, config: EchoSettings) -> None:
        """`config`: the deployment's echo settings (BLENDSERVE_ECHO_*); a keyword given here wins over it."""
        self.model_name = model_name
        cfg = config
        self.tokens_per_s = tokens_per_s or cfg.tokens_per_s
        self.prefill_tokens_per_s = prefill_tokens_per_s or cfg.prefill_tokens_per_s
        self.max_running = max_running or cfg.max_running
        self.cache = _PrefixModel(cache_tokens or cfg.cache_tokens)
        self.rng = random.Random(seed)
        self._running: list[tuple[float, int, GenResult]] = []
        self.cpu_s = 0.0            # this thread's CPU inside the simulation: the stand-in's own cost, not the worker's
        self._reported = time.monotonic()

    def spent(self, cpu_s: float, report: bool = False) -> None:
        """Add to the simulation's CPU; logged every REPORT_S and as a stream ends, so a load test can tell the
        engine stand-in's CPU from the worker's (benchmarks/control_plane.py subtracts it)."""
        self.cpu_s += cpu_s
        if report or time.monotonic() - self._reported > REPORT_S:
            self._reported = time.monotonic()
            log.info("echo engine %x: its simulation used %.3f CPU-s", id(self), self.cpu_s)

    def stats(self) -> EngineStats:
        """Running sequences, and the tokens a real engine's KV would hold for them (prompt + reply)."""
        running = list(self._running)
        return EngineStats(len(running), sum(r.prompt_tokens + r.completion_tokens for _, _, r in running))

    def kv_capacity_tokens(self) -> int:
        return self.cache.capacity * BLOCK

    def step_token_budget(self) -> int | None:
        return 2048

    def close(self) -> None:
        pass

    def generate(self, requests: Iterable[GenRequest],
                 cancelled: Callable[[int], bool] | None = None,
                 urgent: Callable[[], list[GenRequest]] | None = None,
                 cancel_epoch: Callable[[], int] | None = None) -> Iterator[GenResult]:
        """Urgent requests start at once, past the running cap; their tokens reach `on_tokens` at the end."""
        yield from drive(_EchoCore(self), requests, cancelled, urgent, cancel_epoch)

    def _result(self, req: GenRequest) -> GenResult:
        n = req.params.max_tokens
        return GenResult(key=req.key, output_ids=[FILLER] * n, text="x" * n, finish_reason="length",
                         prompt_tokens=len(req.input_ids), cached_tokens=self.cache.lookup_and_insert(req.input_ids))

    def _finish_at(self, req: GenRequest, res: GenResult) -> float:
        rate = self.tokens_per_s * self.rng.lognormvariate(0.0, 0.2)
        prefill = (res.prompt_tokens - res.cached_tokens) / self.prefill_tokens_per_s
        return time.monotonic() + prefill + res.completion_tokens / rate
