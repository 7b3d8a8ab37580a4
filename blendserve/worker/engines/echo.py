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
text), and cancellations are checked once a step (STEP_S), not on every pass, and only
when the caller's `cancel_epoch` moved since the last check (nothing was cancelled in
most steps of a run: 64 ranks x 256 running x 20 steps/s made 330,000 `cancelled`
calls a second).
"""
from __future__ import annotations

import heapq
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator

from blendserve.core.config import EchoSettings
from blendserve.worker.engines.base import EngineStats, GenRequest, GenResult

BLOCK = 16
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


class EchoEngine:
    def __init__(self, model_name: str, *, tokens_per_s: float | None = None,
                 prefill_tokens_per_s: float | None = None, max_running: int | None = None,
                 cache_tokens: int | None = None, seed: int = 0,
                 config: EchoSettings | None = None) -> None:
        self.model_name = model_name
        cfg = config or EchoSettings()
        self.tokens_per_s = tokens_per_s or cfg.tokens_per_s
        self.prefill_tokens_per_s = prefill_tokens_per_s or cfg.prefill_tokens_per_s
        self.max_running = max_running or cfg.max_running
        self.cache = _PrefixModel(cache_tokens or cfg.cache_tokens)
        self.rng = random.Random(seed)
        self._running: list[tuple[float, int, GenResult]] = []

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
        """Urgent requests start at once, past the running cap; their tokens reach `on_tokens` at the end.
        With `cancel_epoch`, a step asks `cancelled` only when the epoch moved since the last pass."""
        feed = iter(requests)
        running: list[tuple[float, int, GenResult]] = []      # (finish time, tie-break, result)
        self._running = running
        callbacks: dict[int, Callable[[list[int]], None]] = {}
        exhausted, n, checked = False, 0, float("-inf")
        seen: int | None = None          # the cancel epoch of the last full pass
        while running or not exhausted:
            for req in urgent() if urgent is not None else ():
                n += 1
                heapq.heappush(running, (self._finish_at(req, res := self._result(req)), n, res))
                if req.on_tokens is not None:
                    callbacks[req.key] = req.on_tokens
            while not exhausted and len(running) < self.max_running:
                req = next(feed, None)
                if req is None:
                    exhausted = True
                    break
                n += 1
                heapq.heappush(running, (self._finish_at(req, res := self._result(req)), n, res))
            if not running:
                break
            wait = running[0][0] - time.monotonic()
            if wait > 0:
                time.sleep(min(wait, 0.05))          # between "steps": cancellations land within 50 ms
            if cancelled is not None and time.monotonic() - checked >= STEP_S:
                checked = time.monotonic()
                epoch = cancel_epoch() if cancel_epoch is not None else None     # read before the pass
                if epoch is None or epoch != seen:                              # else nothing was cancelled
                    seen = epoch
                    kept = [r for r in running if not cancelled(r[2].key)]
                    if len(kept) != len(running):
                        running = self._running = kept
                        heapq.heapify(running)
            while running and running[0][0] <= time.monotonic():
                res = heapq.heappop(running)[2]
                if (cb := callbacks.pop(res.key, None)) is not None:
                    cb(res.output_ids)
                yield res

    def _result(self, req: GenRequest) -> GenResult:
        n = req.params.max_tokens
        return GenResult(key=req.key, output_ids=[FILLER] * n, text="x" * n, finish_reason="length",
                         prompt_tokens=len(req.input_ids), cached_tokens=self.cache.lookup_and_insert(req.input_ids))

    def _finish_at(self, req: GenRequest, res: GenResult) -> float:
        rate = self.tokens_per_s * self.rng.lognormvariate(0.0, 0.2)
        prefill = (res.prompt_tokens - res.cached_tokens) / self.prefill_tokens_per_s
        return time.monotonic() + prefill + res.completion_tokens / rate
