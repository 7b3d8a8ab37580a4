"""Engine.stats(): what the worker's heartbeat pushes (running sequences, KV tokens they hold), mid-stream and after."""
from __future__ import annotations

from blendserve.core.engine_settings import EchoSettings
from blendserve.worker.engines.base import EngineStats, GenRequest, SamplingParams, engine_stats
from blendserve.worker.engines.echo import EchoEngine


def _reqs(n: int, prompt: int, out: int, step: int = 0) -> list[GenRequest]:
    return [GenRequest(key=i, input_ids=[5 + i] * prompt,
                       params=SamplingParams(max_tokens=out + step * i, temperature=0.0)) for i in range(n)]


def test_cpu_engine_reports_its_running_batch(tiny_engine):
    assert engine_stats(tiny_engine) == EngineStats(0, 0)           # before any stream
    it = tiny_engine.generate(_reqs(6, prompt=10, out=4, step=8))   # ends one by one
    next(it)                                                        # first result out; others still running
    mid = engine_stats(tiny_engine)
    assert 1 <= mid.running_sequences <= 4                          # max_running=4
    assert mid.kv_used_tokens >= mid.running_sequences * 10 and mid.kv_used_tokens % 4 == 0   # whole blocks
    rest = list(it)
    assert len(rest) == 5
    assert engine_stats(tiny_engine) == EngineStats(0, 0)           # all freed (cached blocks are not "in use")


def test_echo_engine_reports_and_unknown_engines_say_so():
    e = EchoEngine("m", tokens_per_s=100, prefill_tokens_per_s=1e9, max_running=3, config=EchoSettings())
    it = e.generate(_reqs(5, prompt=8, out=10))
    next(it)
    mid = engine_stats(e)
    assert mid.running_sequences == 2 and mid.kv_used_tokens == 2 * (8 + 10)   # 3 ran, one just came out
    list(it)
    assert engine_stats(e) == EngineStats(0, 0)
    assert engine_stats(object()) == EngineStats(None, None)        # an engine without stats(): unknown, not 0
