"""What a worker in front of a running server does with a big batch, measured the same way on every server:
how many batch requests it keeps in flight (at least the server's running cap, or as many as its KV pool
holds), and how long an interactive request sent mid-batch takes to its first token, against the same
request on the idle server (and the chat's time between tokens while busy: one step of the server)."""
from __future__ import annotations

import time
from dataclasses import dataclass

from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.server import ServerEngine


@dataclass
class Feeding:
    most_in_flight: int       # batch requests in flight at once, at most
    idle_first_token_s: float
    busy_first_token_s: float
    busy_step_s: float        # the chat's time between tokens while the batch runs: one step of the server
    results: int


def first_token_s(engine: ServerEngine, ids: list[int], batch: list[GenRequest] | None = None,
                  after: int = 0) -> tuple[float, float, int, int]:
    """Seconds from an interactive request's hand-over to its first token, and then between its tokens;
    with `batch`, handed over once `after` batch results are in. Also: the most batch requests in flight,
    and the results."""
    sent: list[float] = []
    first: list[float] = []

    def on_tokens(tokens: list[int]) -> None:
        if tokens:
            first.append(time.monotonic())

    chat = GenRequest(-1, ids, SamplingParams(max_tokens=6, temperature=0.0), on_tokens=on_tokens)
    done = [0]
    most = [0]

    def urgent() -> list[GenRequest]:
        most[0] = max(most[0], sum(key >= 0 for key in engine._flight))
        if not sent and done[0] >= after:
            sent.append(time.monotonic())
            return [chat]
        return []

    for _ in engine.generate(batch or [], urgent=urgent):
        done[0] += 1
    assert first and sent, "the interactive request never streamed a token"
    gaps = sorted(b - a for a, b in zip(first, first[1:])) or [0.0]
    return first[0] - sent[0], gaps[len(gaps) // 2], most[0], done[0]


def measure(engine: ServerEngine, chat_ids: list[int], batch_ids: list[int], n: int = 400,
            max_tokens: int = 8) -> Feeding:
    """The chat alone (best of three), then the chat sent once a tenth of an n-request batch is done."""
    idle = min(first_token_s(engine, chat_ids)[0] for _ in range(3))
    batch = [GenRequest(i, batch_ids, SamplingParams(max_tokens=max_tokens, temperature=0.0)) for i in range(n)]
    busy, step, most, results = first_token_s(engine, chat_ids, batch, after=n // 10)
    return Feeding(most, idle, busy, step, results - 1)


def assert_fed(engine: ServerEngine, chat_ids: list[int], batch_ids: list[int], server: str) -> Feeding:
    """A batch of `batch_ids` (8 tokens each) three windows long and at most 400 requests, with the chat sent
    mid-batch: every result comes back, the worker keeps the server's running cap in flight (or all its KV pool
    holds), and the chat streams. Its first token while the batch runs is printed, not bounded: on a CPU test
    bed it is many idle times (docs/engine-servers.md: the priority measurements), so no bound would hold in CI."""
    holds = int(engine.settings.in_flight_kv * engine.kv_capacity_tokens()) // (len(batch_ids) + 8)
    n = min(400, 3 * min(engine.info.running_cap or holds, holds) + 40)
    f = measure(engine, chat_ids, batch_ids, n=n, max_tokens=8)
    print(f"{server} server: {f}; running cap {engine.info.running_cap}, KV window {holds} requests, batch {n}")
    assert f.results == n
    assert f.most_in_flight >= min(engine.info.running_cap, holds) - 1
    assert f.busy_first_token_s > 0
    return f
