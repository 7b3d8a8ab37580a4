"""The vLLM engine on SmolLM2 (CPU): greedy output, prefix-cache hits, finish reasons, lazy admission, cancel."""
from __future__ import annotations

from pathlib import Path

import pytest

from blendserve.core.modelstore import load_tokenizer
from blendserve.worker.engines.base import GenRequest, GenResult, SamplingParams
from blendserve.worker.engines.vllm import VllmEngine
from tests.vllm.conftest import OPTIONS

pytest.importorskip("vllm", reason="vllm is not installed in this interpreter (scripts/setup_vllm.sh installs it)")

GREEDY = SamplingParams(max_tokens=24, temperature=0.0)
SYSTEM = ("You are a careful assistant for a school. Answer every question in one short sentence, "
          "with no preamble, no lists and no follow-up questions. ") * 6


def chat_ids(path: Path, question: str, system: str = "You are a helpful assistant.") -> list[int]:
    tok = load_tokenizer(path)
    text = tok.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": question}],
                                   add_generation_prompt=True, tokenize=False)
    return tok(text, add_special_tokens=False)["input_ids"]


def run(engine: VllmEngine, requests: list[GenRequest], **kw) -> dict[int, GenResult]:
    return {r.key: r for r in engine.generate(requests, **kw)}


def test_kv_capacity_is_the_configured_blocks(engine: VllmEngine) -> None:
    """num_blocks overrides the cache size vLLM derives from VLLM_CPU_KVCACHE_SPACE, and the planner is told."""
    assert engine.kv_capacity_tokens() == OPTIONS.num_blocks * OPTIONS.block_size


def test_greedy_output_and_finish_reasons(engine: VllmEngine, smollm2_checkpoint: Path) -> None:
    assert engine.kv_capacity_tokens() > 10_000
    paris = chat_ids(smollm2_checkpoint, "Complete the sentence: The capital of France is")
    out = run(engine, [GenRequest(1, paris, SamplingParams(max_tokens=64, temperature=0.0)),
                       GenRequest(2, paris, SamplingParams(max_tokens=3, temperature=0.0)),
                       GenRequest(3, paris, SamplingParams(max_tokens=64, temperature=0.0, stop=("Paris",)))])
    assert "Paris" in out[1].text and out[1].finish_reason == "stop"
    assert out[2].finish_reason == "length" and out[2].completion_tokens == 3
    assert out[2].output_ids == out[1].output_ids[:3]            # greedy is greedy, whatever max_tokens
    assert out[3].finish_reason == "stop" and "Paris" not in out[3].text
    assert out[3].text == out[1].text[: out[1].text.index("Paris")]
    assert all(r.prompt_tokens == len(paris) for r in out.values())


def test_shared_prefix_is_reported_cached(engine: VllmEngine, smollm2_checkpoint: Path) -> None:
    questions = ["Why is the sky blue?", "What do bees make?", "How many legs has a spider?", "What is ice?"]
    requests = [GenRequest(10 + i, chat_ids(smollm2_checkpoint, q, SYSTEM), GREEDY) for i, q in enumerate(questions)]
    first = run(engine, requests[:1])[10]
    rest = run(engine, requests[1:])
    prefix = len(chat_ids(smollm2_checkpoint, "", SYSTEM)) - 8     # the shared system prompt, roughly
    assert prefix > 4 * OPTIONS.block_size
    assert first.cached_tokens <= first.prompt_tokens
    for r in rest.values():
        assert r.cached_tokens % OPTIONS.block_size == 0           # vLLM caches whole blocks
        assert prefix - OPTIONS.block_size <= r.cached_tokens <= r.prompt_tokens
        assert r.text.strip()


def test_admits_lazily_in_order(engine: VllmEngine, smollm2_checkpoint: Path) -> None:
    ids = chat_ids(smollm2_checkpoint, "Count from one to twenty.")
    requests = [GenRequest(100 + i, ids, SamplingParams(max_tokens=4 + 2 * i, temperature=0.0)) for i in range(10)]
    pulled: list[int] = []

    def stream():
        for r in requests:
            pulled.append(r.key)
            yield r

    finished, most = [], 0
    for res in engine.generate(stream()):
        # Never more than max_num_seqs running and `queued` waiting handed to vLLM and unfinished.
        most = max(most, len(pulled) - len(finished))
        finished.append(res.key)
    assert most == OPTIONS.max_num_seqs + OPTIONS.queued
    assert pulled == [r.key for r in requests]
    assert sorted(finished) == pulled
    assert finished[:2] == [100, 101]         # shortest first: admitted first, same prompt


def test_cancelled_request_is_dropped(engine: VllmEngine, smollm2_checkpoint: Path) -> None:
    ids = chat_ids(smollm2_checkpoint, "Write a very long story about a dragon.")
    long = GenRequest(200, ids, SamplingParams(max_tokens=400, temperature=0.0))
    short = [GenRequest(201 + i, ids, SamplingParams(max_tokens=8 + 8 * i, temperature=0.0)) for i in range(3)]
    done: set[int] = set()

    def cancelled(key: int) -> bool:
        return key == 200 and len(done) >= 1       # cancel the long one once a short one finished

    results = []
    for res in engine.generate([long, *short], cancelled=cancelled):
        done.add(res.key)
        results.append(res)
    assert sorted(r.key for r in results) == [201, 202, 203]
    # The engine is clean afterwards: the same key runs again.
    again = run(engine, [GenRequest(200, ids, SamplingParams(max_tokens=5, temperature=0.0))])
    assert again[200].completion_tokens == 5


def test_cancel_checks_wait_for_the_cancel_epoch(engine: VllmEngine, smollm2_checkpoint: Path) -> None:
    """While the worker's cancel epoch stands still, no step asks about any request; once it moves, the
    cancelled request is dropped at the next step."""
    ids = chat_ids(smollm2_checkpoint, "Write a very long story about a dragon.")
    long = GenRequest(300, ids, SamplingParams(max_tokens=300, temperature=0.0))
    short = GenRequest(301, ids, SamplingParams(max_tokens=6, temperature=0.0))
    asked: list[int] = []
    gone: set[int] = set()
    epoch = [0]

    def cancelled(key: int) -> bool:
        asked.append(key)
        return key in gone

    results, asked_before = [], None
    for res in engine.generate([long, short], cancelled=cancelled, cancel_epoch=lambda: epoch[0]):
        results.append(res.key)
        asked_before = list(asked)
        gone.add(300)               # cancelled, but the engine learns it only through the epoch
        epoch[0] += 1
    assert results == [301]
    assert sorted(asked_before) == [300, 301]       # the first pass only, over several steps
    assert asked[len(asked_before):] == [300]


def test_step_budget_is_max_num_batched_tokens(engine: VllmEngine) -> None:
    assert engine.step_token_budget() == OPTIONS.max_num_batched_tokens


def test_a_vllm_engine_without_cuda_says_it_computes_on_a_cpu(engine: VllmEngine) -> None:
    """The planner prices its rounds on the CPU profile, not on an H100 (blendserve/scheduler/blend.py); on a GPU, on
    the GPU's profile where the planner has one."""
    import torch

    from blendserve.worker.engines.base import device_profile

    assert engine.hardware() == ("cpu" if not torch.cuda.is_available() else device_profile())


def test_logit_bias_and_penalties_reach_vllm(engine: VllmEngine, smollm2_checkpoint: Path) -> None:
    ids = chat_ids(smollm2_checkpoint, "Repeat the word cat ten times.")
    plain = run(engine, [GenRequest(300, ids, SamplingParams(max_tokens=16, temperature=0.0))])[300]
    forced = run(engine, [GenRequest(301, ids, SamplingParams(max_tokens=6, temperature=0.0,
                                                              logit_bias=((1000, 100.0),)))])[301]
    assert forced.output_ids == [1000] * 6
    banned = run(engine, [GenRequest(302, ids, SamplingParams(max_tokens=16, temperature=0.0,
                                                              logit_bias=((plain.output_ids[0], -100.0),)))])[302]
    assert banned.output_ids[0] != plain.output_ids[0]
    penalized = run(engine, [GenRequest(303, ids, SamplingParams(max_tokens=16, temperature=0.0,
                                                                 frequency_penalty=2.0, presence_penalty=2.0))])[303]
    assert penalized.output_ids != plain.output_ids


def test_urgent_requests_run_beside_batch_work_and_stream_their_tokens(engine: VllmEngine,
                                                                     smollm2_checkpoint: Path) -> None:
    """An interactive request handed over mid-stream is added at once and finishes before the batch
    requests still waiting; its tokens reach on_tokens in order and add up to its result."""
    paris = chat_ids(smollm2_checkpoint, "Complete the sentence: The capital of France is")
    batch = [GenRequest(100 + i, chat_ids(smollm2_checkpoint, f"Count to {i + 20}."),
                        SamplingParams(max_tokens=48, temperature=0.0)) for i in range(6)]
    streamed: list[int] = []
    hot = GenRequest(-1, paris, SamplingParams(max_tokens=16, temperature=0.0), on_tokens=streamed.extend)
    polls = iter([[], [hot]])
    order = [r for r in engine.generate(batch, urgent=lambda: next(polls, []))]
    keys = [r.key for r in order]
    assert sorted(keys) == sorted([-1, *(r.key for r in batch)])
    result = order[keys.index(-1)]
    assert streamed == result.output_ids and "Paris" in result.text
    assert keys.index(-1) < len(keys) - 1          # not last: it did not wait for the batch to drain


def test_top_p_zero_is_greedy(engine: VllmEngine, smollm2_checkpoint: Path) -> None:
    """vLLM refuses a top_p of 0; OpenAI's meaning (the likeliest token) reaches it as top_k 1."""
    paris = chat_ids(smollm2_checkpoint, "Complete the sentence: The capital of France is")
    out = run(engine, [GenRequest(1, paris, SamplingParams(max_tokens=12, temperature=0.0)),
                       GenRequest(2, paris, SamplingParams(max_tokens=12, temperature=1.0, top_p=0.0))])
    assert out[2].error is None and out[2].output_ids == out[1].output_ids


def test_the_engine_reads_what_vllm_resolved(engine: VllmEngine) -> None:
    """The running cap the worker feeds to and the step the planner is told are vLLM's own figures."""
    assert engine.resolved == {"max_num_seqs": OPTIONS.max_num_seqs,
                               "max_num_batched_tokens": OPTIONS.max_num_batched_tokens, "enforce_eager": True}
    assert engine.step_token_budget() == engine.resolved["max_num_batched_tokens"]
