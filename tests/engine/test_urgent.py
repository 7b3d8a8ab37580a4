"""Interactive (urgent) requests in the CPU engine: admitted at the next step, ahead of and past batch work,
with outputs identical to running alone, and tokens handed out as they are sampled."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from blendserve.core.engine_settings import CpuEngineSettings
from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.cpu import CpuEngine
from blendserve.worker.engines.speculative import SpecConfig

GREEDY = SamplingParams(max_tokens=16, temperature=0.0)


def engine(tiny_model: Path, **kw) -> CpuEngine:
    args = dict(max_running=4, threads=1, block_size=4, kv_capacity_tokens=4096, dtype=torch.float32)
    return CpuEngine(tiny_model, "tiny", config=CpuEngineSettings(), **{**args, **kw})


def prompt(i: int, n: int = 12) -> list[int]:
    return [(31 * i + 7 * j) % 400 + 5 for j in range(n)]


def on_call(n: int, request: GenRequest):
    """An ``urgent`` poll that hands ``request`` over at its n-th call (from 0), and nothing otherwise."""
    calls = iter(range(10**9))
    return lambda: [request] if next(calls) == n else []


def alone(tiny_model: Path, request: GenRequest) -> list[int]:
    return next(engine(tiny_model, max_running=1).generate([request])).output_ids


@pytest.mark.parametrize("speculative", ["off", "ngram"])
def test_urgent_jumps_the_queue_and_matches_running_alone(tiny_model: Path, speculative: str) -> None:
    """Twelve batch requests, four running at a time; an urgent one handed over at the third step finishes
    before any batch request admitted after it would have started, with its tokens streamed in order
    (with speculative decoding too, where a step may commit several tokens)."""
    e = engine(tiny_model, speculative=SpecConfig(speculative))
    batch = [GenRequest(i, prompt(i), GREEDY) for i in range(12)]
    streamed: list[int] = []
    hot = GenRequest(-1, prompt(99, 20), SamplingParams(max_tokens=6, temperature=0.0), on_tokens=streamed.extend)
    polls = iter([[], [], [hot]])
    order = [r.key for r in e.generate(batch, urgent=lambda: next(polls, []))]
    assert sorted(order) == sorted([-1, *range(12)])
    assert order.index(-1) < 4                    # ahead of everything that was still waiting
    got = list(streamed)
    assert got == alone(tiny_model, hot) and len(got) == 6


def test_urgent_goes_past_the_running_cap_and_preempts_batch_work_for_blocks(tiny_model: Path) -> None:
    """Four batch sequences fill the running cap and most of a 16-block pool (they fit it alone); the
    urgent one runs beside them and takes blocks from the newest, which is recomputed later. Every
    output still equals running alone."""
    short = SamplingParams(max_tokens=2, temperature=0.0)
    batch = [GenRequest(i, prompt(i, 10), short) for i in range(4)]
    hot = GenRequest(-1, prompt(50, 22), SamplingParams(max_tokens=2, temperature=0.0))
    steps = {}
    for with_hot in (False, True):
        e = engine(tiny_model, max_running=4, kv_capacity_tokens=64, step_tokens=64)
        e.step_log = []
        polls = iter([[], [hot] if with_hot else []])
        results = {r.key: r for r in e.generate(batch, urgent=lambda: next(polls, []))}
        steps[with_hot] = e.step_log
        assert e.blocks.free_blocks == e.num_blocks
    assert sum(s.preempted for s in steps[False]) == 0
    assert sum(s.preempted for s in steps[True]) > 0
    assert any(c.seq.key == -1 for c in steps[True][1].chunks)       # admitted at the step it was handed over
    for r in [*batch, hot]:
        assert results[r.key].output_ids == alone(tiny_model, r)


def test_batch_work_waits_while_an_urgent_one_prefills(tiny_model: Path) -> None:
    """The step that carries the urgent prompt carries no batch work, neither a prefill chunk nor the
    decodes of running batch sequences: its time is the urgent request's time to first token. The next
    step carries both again, and every output equals running alone."""
    e = engine(tiny_model, max_running=8, step_tokens=256)
    e.step_log = []
    batch = [GenRequest(i, prompt(i, 40), GREEDY) for i in range(6)]
    hot = GenRequest(-1, prompt(77, 30), SamplingParams(max_tokens=3, temperature=0.0))
    polls = iter([[hot]])
    results = {r.key: r for r in e.generate(batch, urgent=lambda: next(polls, []))}
    assert [c.seq.key for c in e.step_log[0].chunks] == [-1]

    e.step_log = []
    # The engine polls at the top of each step and between its layers: hand it over at step 2's top,
    # while the batch decodes.
    results = {r.key: r for r in e.generate(batch, urgent=on_call(2 * e.model.n_layers, hot))}
    keys = [[c.seq.key for c in s.chunks] for s in e.step_log]
    assert all(k >= 0 for k in keys[1]) and len(keys[1]) == 6      # six batch decodes in flight
    assert keys[2] == [-1]                                          # then the urgent prompt alone
    assert -1 in keys[3] and len(keys[3]) > 1                       # then its decode beside batch work
    for r in [*batch, hot]:
        assert results[r.key].output_ids == alone(tiny_model, r)


def test_urgent_alone_runs_when_there_is_no_batch_work(tiny_model: Path) -> None:
    e = engine(tiny_model)
    hot = GenRequest(-2, prompt(3), GREEDY)
    polls = iter([[hot]])
    out = list(e.generate([], urgent=lambda: next(polls, [])))
    assert [r.key for r in out] == [-2] and out[0].output_ids == alone(tiny_model, hot)


def test_batch_work_is_held_to_a_few_tokens_a_step_while_interactive_work_is_about(tiny_model: Path,
                                                                                   monkeypatch) -> None:
    """After an interactive request, a step's batch tokens stay within the engine's rush cap for a while, so
    steps stay short for the next interactive arrival; without one, steps take the whole budget."""
    monkeypatch.setenv("BLENDSERVE_CPU_RUSH_TOKENS", "100")

    def batch_tokens_per_step(with_hot: bool) -> list[int]:
        e = engine(tiny_model, max_running=16, step_tokens=512)
        e.step_log = []
        batch = [GenRequest(i, prompt(i, 60), SamplingParams(max_tokens=4, temperature=0.0)) for i in range(12)]
        hot = GenRequest(-1, prompt(77, 8), SamplingParams(max_tokens=2, temperature=0.0))
        polls = iter([[hot]] if with_hot else [])
        list(e.generate(batch, urgent=lambda: next(polls, [])))
        return [sum(c.n for c in s.chunks if c.seq.key >= 0) for s in e.step_log]

    assert max(batch_tokens_per_step(False)) > 100
    assert max(batch_tokens_per_step(True)) <= 100


def test_a_step_carries_few_batch_sequences_while_interactive_work_runs(tiny_model: Path, monkeypatch) -> None:
    """Twelve batch sequences running; while an interactive one runs, each step carries at most the rush
    cap of their tokens (4 decodes; the others wait with their blocks), and every output still equals
    running alone."""
    monkeypatch.setenv("BLENDSERVE_CPU_RUSH_TOKENS", "4")
    e = engine(tiny_model, max_running=16, step_tokens=512)
    e.step_log = []
    batch = [GenRequest(i, prompt(i, 8), SamplingParams(max_tokens=12, temperature=0.0)) for i in range(12)]
    hot = GenRequest(-1, prompt(77, 8), SamplingParams(max_tokens=6, temperature=0.0))
    polls = iter([[], [], [hot]])
    results = {r.key: r for r in e.generate(batch, urgent=lambda: next(polls, []))}
    with_hot = [s for s in e.step_log if any(c.seq.key == -1 for c in s.chunks)]
    assert with_hot and all(sum(c.seq.key >= 0 for c in s.chunks) <= 4 for s in with_hot)
    assert max(sum(c.seq.key >= 0 for c in s.chunks) for s in e.step_log[:2]) == 12
    for r in [*batch, hot]:
        assert results[r.key].output_ids == alone(tiny_model, r)


def test_an_urgent_prompt_cuts_in_between_two_layers_of_the_step_in_flight(tiny_model: Path) -> None:
    """An interactive request that arrives while a batch step runs (the engine polls between its layers)
    runs its prompt there, as a step of its own, before the batch step ends: its first token is streamed
    before the batch step's tokens are sampled. Neither step disturbs the other: every output equals
    running alone."""
    e = engine(tiny_model, max_running=8, step_tokens=256)
    layers = e.model.n_layers
    assert layers > 1
    e.step_log = []
    events: list[str] = []
    batch = [GenRequest(i, prompt(i, 20), GREEDY, on_tokens=lambda t, i=i: events.append(f"b{i}"))
             for i in range(4)]
    hot = GenRequest(-1, prompt(77, 30), SamplingParams(max_tokens=5, temperature=0.0),
                     on_tokens=lambda t: events.append("hot"))
    # Polls: step 0 at its top and between each pair of its layers, then step 1's top; the next poll is
    # step 1's first between-layers one.
    results = {r.key: r for r in e.generate(batch, urgent=on_call(layers + 1, hot))}
    keys = [[c.seq.key for c in s.chunks] for s in e.step_log]
    assert keys[0] == [0, 1, 2, 3]                 # step 0: the batch's prompts
    assert keys[1] == [-1]                         # logged first: the cut-in, run inside step 1
    assert keys[2] == [0, 1, 2, 3]                 # step 1: the batch's first decodes, the prompt not among them
    assert events.index("hot") < len(batch) * 2    # before step 1's tokens: after step 0's four only
    assert events[:4] == ["b0", "b1", "b2", "b3"] and events[4] == "hot"
    for r in [*batch, hot]:
        assert results[r.key].output_ids == alone(tiny_model, r)


def test_a_cut_in_that_does_not_fit_the_free_blocks_waits_for_the_next_step(tiny_model: Path) -> None:
    """Between layers nothing can be preempted (the step in flight holds its blocks): an urgent prompt
    that needs more blocks than are free runs at the next step instead, preempting batch work there."""
    short = SamplingParams(max_tokens=3, temperature=0.0)
    e = engine(tiny_model, max_running=4, kv_capacity_tokens=64, step_tokens=64)
    layers = e.model.n_layers
    e.step_log = []
    batch = [GenRequest(i, prompt(i, 10), short) for i in range(4)]
    hot = GenRequest(-1, prompt(50, 22), SamplingParams(max_tokens=2, temperature=0.0))
    results = {r.key: r for r in e.generate(batch, urgent=on_call(layers + 1, hot))}
    keys = [[c.seq.key for c in s.chunks] for s in e.step_log]
    assert keys[1] == [0, 1, 2, 3]                 # no cut-in step logged inside step 1
    assert keys[2] == [-1]                         # the prompt alone at the next step, after preempting
    assert sum(s.preempted for s in e.step_log) > 0
    for r in [*batch, hot]:
        assert results[r.key].output_ids == alone(tiny_model, r)
