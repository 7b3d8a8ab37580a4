"""Interactive prefill shared fairly in the CPU engine: a short chat's prompt never queues behind another
caller's long one, a long interactive prompt leaves batch work its share of each step, and a stream of
interactive prompts slows batch work but never stops it; every output still equals running alone."""
from __future__ import annotations

from pathlib import Path

from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.cpu.scheduler import Scheduler
from tests.engine.test_urgent import GREEDY, alone, engine, prompt


def _keys(e) -> list[list[int]]:
    return [[c.seq.key for c in s.chunks] for s in e.step_log]


def test_a_short_chat_is_prefilled_before_a_long_prompt_that_came_first(tiny_model: Path) -> None:
    e = engine(tiny_model, max_running=8, step_tokens=64, kv_capacity_tokens=8192)
    e.step_log = []
    long = GenRequest(-1, prompt(5, 400), SamplingParams(max_tokens=2, temperature=0.0))
    short = GenRequest(-2, prompt(9, 20), SamplingParams(max_tokens=2, temperature=0.0))
    polls = iter([[long, short]])                      # the long one arrives first
    results = {r.key: r for r in e.generate([], urgent=lambda: next(polls, []))}
    first = e.step_log[0].chunks
    assert first[0].seq.key == -2 and first[0].n == 20, "the short prompt goes first, whole"
    done = {k: i for i, keys in enumerate(_keys(e)) for k in keys}
    assert done[-2] < 3 < done[-1], "the short chat finished long before the long prompt's last chunk"
    for r in (long, short):
        assert results[r.key].output_ids == alone(tiny_model, r)


def test_a_long_interactive_prompt_leaves_batch_work_its_share_of_each_step(tiny_model: Path) -> None:
    e = engine(tiny_model, max_running=8, step_tokens=64, kv_capacity_tokens=8192)
    e.step_log = []
    batch = [GenRequest(i, prompt(i, 8), SamplingParams(max_tokens=40, temperature=0.0)) for i in range(4)]
    long = GenRequest(-1, prompt(5, 600), SamplingParams(max_tokens=2, temperature=0.0))
    polls = iter([[], [], [long]])                     # the batch decodes when the long prompt arrives
    results = {r.key: r for r in e.generate(batch, urgent=lambda: next(polls, []))}
    prefilling = [s for s in e.step_log
                  if any(c.seq.key == -1 and c.start + c.n < len(long.input_ids) for c in s.chunks)]
    assert len(prefilling) >= 8, "600 tokens at most 32 a step"
    assert all(any(c.seq.key >= 0 for c in s.chunks) for s in prefilling), \
        "batch decodes go on while a long interactive prompt prefills"
    for r in [*batch, long]:
        assert results[r.key].output_ids == alone(tiny_model, r)


def test_a_stream_of_interactive_prompts_never_stops_batch_work(tiny_model: Path, monkeypatch) -> None:
    """A fresh short interactive prompt at every step: at most RUSH_STEPS steps in a row go without batch work
    (prompts are taken at the top of a step here, none cut in between its layers)."""
    monkeypatch.setenv("BLENDSERVE_CPU_CUT_IN", "false")
    e = engine(tiny_model, max_running=64, step_tokens=64, kv_capacity_tokens=16384)
    e.step_log = []
    batch = [GenRequest(i, prompt(i, 8), SamplingParams(max_tokens=30, temperature=0.0)) for i in range(4)]
    stream = iter([[]] + [[GenRequest(-10 - k, prompt(100 + k, 12), GREEDY)] for k in range(40)])
    results = {r.key: r for r in e.generate(batch, urgent=lambda: next(stream, []))}
    without, worst = 0, 0
    for keys in _keys(e)[1:41]:
        without = 0 if any(k >= 0 for k in keys) else without + 1
        worst = max(worst, without)
    assert worst <= Scheduler.RUSH_STEPS
    assert all(results[r.key].completion_tokens == 30 for r in batch)


def test_tenants_take_turns_at_interactive_prefill(tiny_model: Path) -> None:
    """One tenant's six chats, each a little shorter than another tenant's one, all arriving together: the
    other tenant's chat is prefilled in the first step beside the first tenant's first, not after all six
    (shortest first alone would put it last); every output still equals running alone."""
    e = engine(tiny_model, max_running=16, step_tokens=64, kv_capacity_tokens=8192)
    e.step_log = []
    many = [GenRequest(-1 - i, prompt(10 + i, 24), SamplingParams(max_tokens=2, temperature=0.0), tenant="m")
            for i in range(6)]
    one = GenRequest(-9, prompt(3, 30), SamplingParams(max_tokens=2, temperature=0.0), tenant="a")
    polls = iter([[*many, one]])
    results = {r.key: r for r in e.generate([], urgent=lambda: next(polls, []))}
    first = [c.seq.key for c in e.step_log[0].chunks]
    assert first[:2] == [-1, -9], f"the first tenant's first chat, then the other tenant's: {first}"
    done = {k: i for i, keys in enumerate(_keys(e)) for k in keys}
    assert done[-9] < max(done[r.key] for r in many), "the one chat did not wait for all six"
    for r in [*many, one]:
        assert results[r.key].output_ids == alone(tiny_model, r)


def test_batch_work_that_arrives_while_a_long_prompt_takes_every_token_gets_its_share(tiny_model: Path) -> None:
    """The plan has nothing ready when a long interactive prompt starts (so its prefill may take the whole
    step), then a batch request is: the batch request is pulled and runs beside the prefill's chunks, not
    after the prompt (or a tenant's steady long prompts would shut batch work out)."""
    e = engine(tiny_model, max_running=8, step_tokens=64, kv_capacity_tokens=8192)
    e.step_log = []
    long = GenRequest(-1, prompt(5, 600), SamplingParams(max_tokens=2, temperature=0.0))
    batch = GenRequest(1, prompt(1, 8), SamplingParams(max_tokens=4, temperature=0.0))
    polls = iter([[long]])

    def plan():
        for _ in range(3):
            yield None                                 # no chunk ready for the first steps
        yield batch

    results = {r.key: r for r in e.generate(plan(), urgent=lambda: next(polls, []))}
    steps = _keys(e)
    last_prefill = max(i for i, keys in enumerate(steps) if -1 in keys)
    assert 1 in steps[3], "pulled at the first step after the plan has it (one None a step before), beside the prompt"
    assert max(i for i, keys in enumerate(steps) if 1 in keys) < last_prefill, \
        "the batch request finished before the long prompt's prefill did"
    for r in (long, batch):
        assert results[r.key].output_ids == alone(tiny_model, r)
