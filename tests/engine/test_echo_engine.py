"""The control-plane stand-in engine: requested lengths, a realistic pace, prefix hits, cancellation."""
from __future__ import annotations

import time

from blendserve.core.engine_settings import EchoSettings
from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.echo import BLOCK, EchoEngine


def _req(key: int, ids: list[int], n: int) -> GenRequest:
    return GenRequest(key=key, input_ids=ids, params=SamplingParams(max_tokens=n))


def test_lengths_pace_and_prefix_hits():
    e = EchoEngine("m", tokens_per_s=200, prefill_tokens_per_s=1e9, max_running=8,
                   cache_tokens=10_000, config=EchoSettings())
    shared = list(range(64))
    reqs = [_req(i, shared + [1000 + i] * 5, 20) for i in range(8)]
    t0 = time.monotonic()
    out = list(e.generate(reqs))
    took = time.monotonic() - t0
    assert sorted(r.key for r in out) == list(range(8))
    assert all(r.completion_tokens == 20 and len(r.text) == 20 and r.finish_reason == "length" for r in out)
    assert 0.05 < took < 0.5                  # 20 tokens at ~200/s, all 8 side by side
    hits = sorted(r.cached_tokens for r in out)
    assert hits[0] == 0 and hits[1:] == [64] * 7         # the first computes the shared 4 blocks, the rest hit
    assert 64 % BLOCK == 0


def test_running_cap_and_cancel():
    e = EchoEngine("m", tokens_per_s=100, prefill_tokens_per_s=1e9, max_running=2, config=EchoSettings())
    pulled = []

    def feed():
        for i in range(4):
            pulled.append(i)
            yield _req(i, [1, 2, 3], 10)

    it = e.generate(feed())
    first = next(it)
    assert first.key in (0, 1) and len(pulled) <= 3        # never reads ahead of its room
    rest = list(e.generate(feed(), cancelled=lambda k: k == 3))
    assert sorted(r.key for r in rest) == [0, 1, 2]         # the cancelled one has no result


def test_a_chunk_planned_while_calls_keep_the_engine_busy_runs_in_that_stream():
    """The plan has nothing ready at first (its source yields None) while interactive calls keep coming: the
    stream does not end, and the batch request that becomes ready later is admitted and finishes before the
    calls stop, not after (one tenant's steady calls never shut another's batch out)."""
    e = EchoEngine("m", tokens_per_s=200, prefill_tokens_per_s=1e9, max_running=8, config=EchoSettings())
    t0 = time.monotonic()
    calls = iter(range(100, 120))

    def plan():
        while time.monotonic() - t0 < 0.3:
            yield None                                     # no chunk ready yet
        yield _req(1, [1, 2, 3], 5)

    def urgent() -> list[GenRequest]:
        if time.monotonic() - t0 < 1.5 and (key := next(calls, None)) is not None:
            return [_req(key, [7, 8], 4)]
        return []

    finished = {r.key: time.monotonic() - t0 for r in e.generate(plan(), urgent=urgent)}
    assert 1 in finished and finished[1] < 1.0, finished
    assert max(finished.values()) < 3.0


def test_a_plan_with_nothing_ready_ends_an_idle_stream():
    e = EchoEngine("m", tokens_per_s=200, prefill_tokens_per_s=1e9, max_running=8, config=EchoSettings())

    def plan():
        while True:
            yield None

    t0 = time.monotonic()
    assert list(e.generate(plan())) == [] and time.monotonic() - t0 < 0.5
