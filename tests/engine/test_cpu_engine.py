"""The CPU engine: correctness of batching, sampling, stopping and prefix reuse."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaForCausalLM

from core.modelstore import load_tokenizer
from worker.engines.base import GenRequest, GenResult, SamplingParams
from worker.engines.cpu import CpuEngine, _draw, _KVSlots, _Llama, _Prefill

GREEDY = SamplingParams(max_tokens=12, temperature=0.0)


def prompts(n: int, base: int = 10) -> list[list[int]]:
    """Distinct prompts of different lengths (ids below the tiny vocab size)."""
    return [[(base + 7 * i + j) % 500 + 3 for j in range(5 + 3 * i)] for i in range(n)]


def run(engine: CpuEngine, requests: list[GenRequest]) -> dict[int, GenResult]:
    results = {r.key: r for r in engine.generate(requests)}
    assert sorted(results) == sorted(r.key for r in requests)
    return results


def test_forward_matches_transformers(tiny_model: Path) -> None:
    reference = LlamaForCausalLM.from_pretrained(tiny_model).eval()
    model = _Llama(tiny_model, torch.float32)
    ids = torch.tensor([prompts(3)[2]])
    kv = _KVSlots(model)
    kv.reserve(1, ids.shape[1])
    with torch.inference_mode():
        expected = reference(ids).logits[0, -1]
        got = model.forward(ids, torch.arange(ids.shape[1]).unsqueeze(0), _Prefill(kv, 0, 0, ids.shape[1]))[0]
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_greedy_batch_equals_alone(tiny_model: Path) -> None:
    batch = CpuEngine(tiny_model, "tiny", max_batch=4, threads=1, dtype=torch.float32)
    requests = [GenRequest(i, p, SamplingParams(max_tokens=8 + 3 * i, temperature=0.0)) for i, p in enumerate(prompts(7))]
    together = run(batch, requests)
    for request in requests:
        alone = CpuEngine(tiny_model, "tiny", max_batch=1, threads=1, dtype=torch.float32)
        assert next(alone.generate([request])).output_ids == together[request.key].output_ids


def test_kv_slots_grow_and_shrink(tiny_model: Path, monkeypatch) -> None:
    """With a small growth step the buffer is reallocated (grown, then shrunk) mid-batch; results do not change."""
    monkeypatch.setattr(_KVSlots, "GROW", 4)
    requests = [GenRequest(0, prompts(8)[7], SamplingParams(max_tokens=40, temperature=0.0))]
    requests += [GenRequest(i, p, SamplingParams(max_tokens=3, temperature=0.0)) for i, p in enumerate(prompts(6), 1)]
    engine = CpuEngine(tiny_model, "tiny", max_batch=3, threads=1, dtype=torch.float32)
    together = run(engine, requests)
    assert engine.kv.k[0].shape[2] >= 26 + 40 - 1
    run(engine, [GenRequest(9, [5, 6, 7], SamplingParams(max_tokens=2, temperature=0.0))])
    assert engine.kv.k[0].shape[2] == 4  # shrunk to the short sequence's 4 tokens
    for request in requests:
        alone = CpuEngine(tiny_model, "tiny", max_batch=1, threads=1, dtype=torch.float32, prefix_cache_tokens=0)
        assert next(alone.generate([request])).output_ids == together[request.key].output_ids


def test_max_tokens_gives_length(tiny_engine: CpuEngine) -> None:
    results = run(tiny_engine, [GenRequest(i, p, GREEDY) for i, p in enumerate(prompts(3))])
    for r in results.values():
        assert r.finish_reason == "length"
        assert r.completion_tokens == len(r.output_ids) == GREEDY.max_tokens
        assert r.prompt_tokens == len(prompts(3)[r.key])


def test_stop_string_is_cut(tiny_engine: CpuEngine) -> None:
    prompt = prompts(1)[0]
    full = run(tiny_engine, [GenRequest(0, prompt, GREEDY)])[0].text
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    cut = run(tiny_engine, [GenRequest(1, prompt, SamplingParams(max_tokens=12, temperature=0.0, stop=("zzz", stop)))])[1]
    assert cut.finish_reason == "stop"
    assert cut.text == full[: full.index(stop)]
    assert stop not in cut.text


def test_eos_stops(tiny_model: Path) -> None:
    engine = CpuEngine(tiny_model, "tiny", max_batch=2, threads=1)
    first = run(engine, [GenRequest(0, prompts(1)[0], GREEDY)])[0].output_ids[0]
    engine.eos.add(first)  # pretend the first greedy token ends the sequence
    result = run(engine, [GenRequest(1, prompts(1)[0], GREEDY)])[1]
    assert (result.output_ids, result.finish_reason) == ([first], "stop")


def test_seed_is_reproducible_regardless_of_batch(tiny_model: Path) -> None:
    sampled = SamplingParams(max_tokens=16, temperature=1.0, seed=1234)
    target = GenRequest(0, prompts(1)[0], sampled)
    alone = run(CpuEngine(tiny_model, "tiny", max_batch=1, threads=1), [target])[0].output_ids
    mates = [GenRequest(i, p, SamplingParams(max_tokens=5 + i, temperature=1.0)) for i, p in enumerate(prompts(5, 99), 1)]
    batched = run(CpuEngine(tiny_model, "tiny", max_batch=4, threads=1), [mates[0], target, *mates[1:]])[0].output_ids
    assert batched == alone
    other = GenRequest(9, target.input_ids, SamplingParams(max_tokens=16, temperature=1.0, seed=4321))
    assert run(CpuEngine(tiny_model, "tiny", max_batch=1, threads=1), [other])[9].output_ids != alone


def test_tiny_top_p_is_greedy(tiny_engine: CpuEngine) -> None:
    prompt = prompts(1)[0]
    greedy = run(tiny_engine, [GenRequest(0, prompt, GREEDY)])[0].output_ids
    nucleus = SamplingParams(max_tokens=12, temperature=1.0, top_p=1e-6)
    assert run(tiny_engine, [GenRequest(1, prompt, nucleus)])[1].output_ids == greedy


def test_shared_prefix_is_served_from_cache(tiny_model: Path) -> None:
    prefix = prompts(8)[7][:20]
    a, b = prefix + [40, 41, 42], prefix + [50, 51]
    engine = CpuEngine(tiny_model, "tiny", max_batch=4, threads=1, dtype=torch.float32)
    results = run(engine, [GenRequest(0, a, GREEDY), GenRequest(1, b, GREEDY)])
    assert results[0].cached_tokens == 0
    assert results[1].cached_tokens == len(prefix)
    fresh = CpuEngine(tiny_model, "tiny", max_batch=1, threads=1, dtype=torch.float32)
    assert run(fresh, [GenRequest(1, b, GREEDY)])[1].output_ids == results[1].output_ids
    again = run(engine, [GenRequest(2, a, GREEDY)])[2]  # the whole prompt is cached: all but its last token
    assert again.cached_tokens == len(a) - 1 and again.output_ids == results[0].output_ids


def test_pulls_lazily(tiny_model: Path) -> None:
    max_batch = 3
    engine = CpuEngine(tiny_model, "tiny", max_batch=max_batch, threads=1)
    pulled: list[int] = []

    def stream():
        for i, p in enumerate(prompts(10)):
            pulled.append(i)
            yield GenRequest(i, p, SamplingParams(max_tokens=2 + i % 4, temperature=0.0))

    done = 0
    for _ in engine.generate(stream()):
        done += 1
        assert len(pulled) - done <= max_batch
    assert done == 10 and pulled == list(range(10))


def test_kv_capacity_limits_admission(tiny_model: Path) -> None:
    engine = CpuEngine(tiny_model, "tiny", max_batch=4, threads=1, kv_capacity_tokens=12)
    assert engine.kv_capacity_tokens() == 12
    pulled: list[int] = []

    def stream():
        for i in range(4):
            pulled.append(i)
            yield GenRequest(i, prompts(1, 3 * i)[0], SamplingParams(max_tokens=10, temperature=0.0))

    results = engine.generate(stream())
    first = next(results)
    assert first.key in (0, 1) and pulled == [0, 1, 2]  # 2 is pulled but waits: 3 slots x 6 tokens > 12
    assert sorted([first.key, *(r.key for r in results)]) == [0, 1, 2, 3]


def test_smollm2_knows_paris(smollm2_checkpoint: Path) -> None:
    """On a fresh engine, and again after another chat left the chat template's prefix in the cache
    (the prefill then attends over cached K/V: a precision slip there once changed the answer)."""
    tok = load_tokenizer(smollm2_checkpoint)

    def chat(question: str) -> list[int]:
        text = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                       add_generation_prompt=True)
        return tok(text, add_special_tokens=False)["input_ids"]

    paris = GenRequest(0, chat("What is the capital of France?"), SamplingParams(max_tokens=30, temperature=0.0))
    result = next(CpuEngine(smollm2_checkpoint, "SmolLM2-135M-Instruct").generate([paris]))
    assert "Paris" in result.text
    assert result.finish_reason == "stop"

    engine = CpuEngine(smollm2_checkpoint, "SmolLM2-135M-Instruct")
    run(engine, [GenRequest(1, chat("Say hello."), SamplingParams(max_tokens=4, temperature=0.0))])
    cached = run(engine, [paris])[0]
    assert cached.cached_tokens > 0
    assert cached.text == result.text


def test_prefix_tree_shares_and_splits(tiny_model: Path) -> None:
    """Prompts that branch at different depths each reuse exactly their common prefix, and stay correct."""
    base = prompts(8)[7][:24]
    tree = [base + [40, 41], base + [50, 51, 52], base[:10] + [60, 61], base[:10] + [60, 70], [90, 91, 92]]
    engine = CpuEngine(tiny_model, "tiny", max_batch=2, threads=1, dtype=torch.float32)
    results = run(engine, [GenRequest(i, p, GREEDY) for i, p in enumerate(tree)])
    assert [results[i].cached_tokens for i in range(5)] == [0, 24, 10, 11, 0]
    # 26 + 3 more for the second branch, 2 + 1 for the third and fourth, 3 for the last.
    assert engine.prefix_cache.tokens == 26 + 3 + 2 + 1 + 3
    for i, p in enumerate(tree):
        alone = CpuEngine(tiny_model, "tiny", max_batch=1, threads=1, dtype=torch.float32, prefix_cache_tokens=0)
        assert run(alone, [GenRequest(i, p, GREEDY)])[i].output_ids == results[i].output_ids
        assert alone.prefix_cache.tokens == 0


def test_prefix_cache_evicts_least_recently_used(tiny_model: Path) -> None:
    engine = CpuEngine(tiny_model, "tiny", max_batch=1, threads=1, prefix_cache_tokens=30)
    a, b, c = ([base + j for j in range(12)] for base in (10, 100, 200))
    one = SamplingParams(max_tokens=1, temperature=0.0)
    run(engine, [GenRequest(0, a, one), GenRequest(1, b, one)])
    assert run(engine, [GenRequest(2, a + [7], one)])[2].cached_tokens == 12  # touches a
    run(engine, [GenRequest(3, c, one)])  # 12 + 1 + 12 + 12 > 30: b, the least recently used, goes
    assert engine.prefix_cache.tokens <= 30
    assert run(engine, [GenRequest(4, b + [7], one)])[4].cached_tokens == 0


def test_cancelled_requests_are_dropped(tiny_engine: CpuEngine) -> None:
    requests = [GenRequest(i, p, SamplingParams(max_tokens=2 if i == 0 else 20, temperature=0.0))
                for i, p in enumerate(prompts(4))]
    cancelled: set[int] = set()
    keys = []
    for result in tiny_engine.generate(requests, cancelled=cancelled.__contains__):
        keys.append(result.key)
        cancelled.add(1)  # cancelled after the first result, while it runs
    assert keys[0] == 0 and sorted(keys) == [0, 2, 3]


def test_draw_follows_the_nucleus() -> None:
    probs = torch.tensor([0.5, 0.3, 0.2])
    gen = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.tensor([_draw(probs, 1.0, gen) for _ in range(3000)]), minlength=3) / 3000
    torch.testing.assert_close(counts, probs, atol=0.04, rtol=0)
    # top_p 0.6: token 1 follows 0.5 of mass, within the nucleus; token 2 follows 0.8, outside.
    nucleus = torch.bincount(torch.tensor([_draw(probs, 0.6, gen) for _ in range(3000)]), minlength=3) / 3000
    torch.testing.assert_close(nucleus, torch.tensor([0.625, 0.375, 0.0]), atol=0.04, rtol=0)
    flat = torch.full((1000,), 1e-3)  # the 64 likeliest hold too little: falls back to the whole vocabulary
    assert len({_draw(flat, 0.5, gen) for _ in range(200)}) > 64


def test_default_dtype_follows_the_cpu(tmp_path: Path) -> None:
    from worker.engines.cpu import default_dtype

    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nflags : fpu avx2 avx512f avx512_bf16\n")
    assert default_dtype(info) == torch.bfloat16
    info.write_text("processor : 0\nflags : fpu avx2 avx512f\n")
    assert default_dtype(info) == torch.float32
    assert default_dtype(tmp_path / "missing") == torch.float32
