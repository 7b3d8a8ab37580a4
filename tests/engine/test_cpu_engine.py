"""The CPU engine: correctness of mixed steps, paged prefix reuse, preemption, sampling and stopping."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM

from blendserve.core.engine_settings import CpuEngineSettings
from blendserve.core.modelstore import load_tokenizer
from blendserve.worker.engines.base import GenRequest, GenResult, SamplingParams
from blendserve.worker.engines.cpu import CpuEngine
from blendserve.worker.engines.cpu.kv_cache import Chunk, KVPool, PagedAttention
from blendserve.worker.engines.cpu.model import Llama, default_dtype
from blendserve.worker.engines.cpu.sampler import draw

GREEDY = SamplingParams(max_tokens=12, temperature=0.0)


def prompts(n: int, base: int = 10) -> list[list[int]]:
    """Distinct prompts of different lengths (ids below the tiny vocab size)."""
    return [[(base + 7 * i + j) % 500 + 3 for j in range(5 + 3 * i)] for i in range(n)]


def engine(tiny_model: Path, **kw) -> CpuEngine:
    args = dict(max_running=4, threads=1, block_size=4, kv_capacity_tokens=4096, dtype=torch.float32)
    return CpuEngine(tiny_model, "tiny", config=CpuEngineSettings(), **{**args, **kw})


def run(e: CpuEngine, requests: list[GenRequest]) -> dict[int, GenResult]:
    results = {r.key: r for r in e.generate(requests)}
    assert sorted(results) == sorted(r.key for r in requests)
    return results


def alone(tiny_model: Path, request: GenRequest) -> list[int]:
    return next(engine(tiny_model, max_running=1).generate([request])).output_ids


def test_forward_matches_transformers(tiny_model: Path) -> None:
    reference = LlamaForCausalLM.from_pretrained(tiny_model).eval()
    model = Llama(tiny_model, torch.float32)
    ids = torch.tensor(prompts(3)[2])
    pool = KVPool(model.n_layers, model.n_kv_heads, model.head_dim, 8, 4)
    attn = PagedAttention(pool, [Chunk(0, 0, len(ids), [5, 2, 7])], model.head_dim ** -0.5)
    with torch.inference_mode():
        expected = reference(ids.unsqueeze(0)).logits[0]
        got = model.forward(ids, torch.arange(len(ids)), attn, torch.arange(len(ids)))
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_greedy_matches_transformers_generate(tiny_model: Path) -> None:
    """Prefill in chunks of 3 tokens beside other sequences' decodes, then decode: the reference's greedy tokens."""
    reference = LlamaForCausalLM.from_pretrained(tiny_model).eval()
    target = prompts(6)[5]
    e = engine(tiny_model, step_tokens=3)
    requests = [GenRequest(0, prompts(1, 77)[0], SamplingParams(max_tokens=20, temperature=0.0)),
                GenRequest(1, target, SamplingParams(max_tokens=10, temperature=0.0))]
    got = run(e, requests)[1].output_ids
    with torch.inference_mode():
        out = reference.generate(torch.tensor([target]), max_new_tokens=10, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
    assert got == out[0, len(target):].tolist()


def test_steps_mix_prefill_chunks_and_decodes_within_the_budget(tiny_model: Path) -> None:
    e = engine(tiny_model, max_running=8, step_tokens=8)
    e.step_log = []
    requests = [GenRequest(i, p, SamplingParams(max_tokens=8 + 3 * i, temperature=0.0))
                for i, p in enumerate(prompts(7))]
    together = run(e, requests)
    assert all(s.prefill_tokens + s.decode_tokens <= 8 for s in e.step_log)
    assert any(s.prefill_tokens and s.decode_tokens for s in e.step_log)   # one pass carried both
    for request in requests:
        assert alone(tiny_model, request) == together[request.key].output_ids


def test_running_set_is_not_bounded_by_slots(tiny_model: Path) -> None:
    e = engine(tiny_model, max_running=100, step_tokens=2048)
    e.step_log = []
    requests = [GenRequest(i, p, SamplingParams(max_tokens=6, temperature=0.0)) for i, p in enumerate(prompts(40, 3))]
    run(e, requests)
    assert max(s.decode_tokens for s in e.step_log) == 40
    assert e.step_token_budget() == 2048


def test_preemption_recomputes_and_changes_nothing(tiny_model: Path) -> None:
    """A pool of 20 blocks of 4 for 7 sequences growing to 25-43 tokens: the newest are preempted and recomputed."""
    e = engine(tiny_model, max_running=8, kv_capacity_tokens=80, step_tokens=16)
    e.step_log = []
    requests = [GenRequest(i, p, SamplingParams(max_tokens=20, temperature=0.0)) for i, p in enumerate(prompts(7))]
    together = run(e, requests)
    assert sum(s.preempted for s in e.step_log) > 0
    for request in requests:
        assert alone(tiny_model, request) == together[request.key].output_ids
        assert together[request.key].cached_tokens == 0   # counted at first admission, not on recompute
    assert e.blocks.free_blocks == e.num_blocks           # every block handed back


def test_a_sequence_longer_than_the_pool_ends_with_length(tiny_model: Path) -> None:
    e = engine(tiny_model, kv_capacity_tokens=16)
    results = run(e, [GenRequest(0, prompts(1)[0], SamplingParams(max_tokens=40, temperature=0.0)),
                      GenRequest(1, list(range(3, 23)), GREEDY)])
    assert results[0].finish_reason == "length" and len(results[0].output_ids) == 16 - 5 + 1
    assert results[1].finish_reason == "length" and results[1].output_ids == []


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
    params = SamplingParams(max_tokens=12, temperature=0.0, stop=("zzz", stop))
    cut = run(tiny_engine, [GenRequest(1, prompt, params)])[1]
    assert cut.finish_reason == "stop"
    assert cut.text == full[: full.index(stop)]
    assert stop not in cut.text


def test_eos_stops(tiny_engine: CpuEngine) -> None:
    first = run(tiny_engine, [GenRequest(0, prompts(1)[0], GREEDY)])[0].output_ids[0]
    tiny_engine.eos.add(first)  # pretend the first greedy token ends the sequence
    result = run(tiny_engine, [GenRequest(1, prompts(1)[0], GREEDY)])[1]
    assert (result.output_ids, result.finish_reason) == ([first], "stop")


def test_seed_is_reproducible_regardless_of_batch(tiny_model: Path) -> None:
    sampled = SamplingParams(max_tokens=16, temperature=1.0, seed=1234)
    target = GenRequest(0, prompts(1)[0], sampled)
    lone = run(engine(tiny_model, max_running=1), [target])[0].output_ids
    mates = [GenRequest(i, p, SamplingParams(max_tokens=5 + i, temperature=1.0))
             for i, p in enumerate(prompts(5, 99), 1)]
    batched = run(engine(tiny_model, step_tokens=6), [mates[0], target, *mates[1:]])[0].output_ids
    assert batched == lone
    other = GenRequest(9, target.input_ids, SamplingParams(max_tokens=16, temperature=1.0, seed=4321))
    assert run(engine(tiny_model), [other])[9].output_ids != lone


def test_tiny_top_p_is_greedy(tiny_engine: CpuEngine) -> None:
    prompt = prompts(1)[0]
    greedy = run(tiny_engine, [GenRequest(0, prompt, GREEDY)])[0].output_ids
    nucleus = SamplingParams(max_tokens=12, temperature=1.0, top_p=1e-6)
    assert run(tiny_engine, [GenRequest(1, prompt, nucleus)])[1].output_ids == greedy


def test_logit_bias_forces_and_bans_a_token(tiny_engine: CpuEngine) -> None:
    prompt = prompts(1)[0]
    greedy = run(tiny_engine, [GenRequest(0, prompt, GREEDY)])[0].output_ids
    forced = SamplingParams(max_tokens=12, temperature=0.0, logit_bias=((7, 100.0),))
    assert run(tiny_engine, [GenRequest(1, prompt, forced)])[1].output_ids == [7] * 12
    sampled = SamplingParams(max_tokens=12, temperature=1.0, seed=3, logit_bias=((7, 100.0),))
    assert run(tiny_engine, [GenRequest(2, prompt, sampled)])[2].output_ids == [7] * 12
    banned = SamplingParams(max_tokens=12, temperature=0.0, logit_bias=((greedy[0], -100.0),))
    out = run(tiny_engine, [GenRequest(3, prompt, banned)])[3].output_ids
    assert out[0] != greedy[0] and greedy[0] not in out


@pytest.mark.parametrize("penalty", ["presence_penalty", "frequency_penalty"])
def test_penalties_discourage_repeats(tiny_engine: CpuEngine, penalty: str) -> None:
    prompt = [13, 20, 27, 34, 41]
    plain = run(tiny_engine, [GenRequest(0, prompt, SamplingParams(max_tokens=24, temperature=0.0))])[0].output_ids
    assert Counter(plain).most_common(1)[0][1] > 1          # unpenalized, the tiny model repeats itself
    params = SamplingParams(max_tokens=24, temperature=0.0, **{penalty: 2.0})
    penalized = run(tiny_engine, [GenRequest(1, prompt, params)])[1].output_ids
    assert penalized != plain and Counter(penalized).most_common(1)[0][1] == 1
    # A negative penalty rewards repeats (OpenAI allows -2..2).
    params = SamplingParams(max_tokens=24, temperature=0.0, **{penalty: -2.0})
    rewarded = run(tiny_engine, [GenRequest(2, prompt, params)])[2].output_ids
    assert Counter(rewarded).most_common(1)[0][1] > Counter(plain).most_common(1)[0][1]


def test_shared_prefix_is_served_from_cache(tiny_model: Path) -> None:
    prefix = prompts(8)[7][:20]
    a, b = prefix + [40, 41, 42], prefix + [50, 51]
    e = engine(tiny_model)
    results = run(e, [GenRequest(0, a, GREEDY), GenRequest(1, b, GREEDY)])
    assert results[0].cached_tokens == 0
    assert results[1].cached_tokens == len(prefix)       # 20: five whole blocks of 4
    assert alone(tiny_model, GenRequest(1, b, GREEDY)) == results[1].output_ids
    again = run(e, [GenRequest(2, a, GREEDY)])[2]  # the whole prompt is cached: all whole blocks but the last token's
    assert again.cached_tokens == 20 and again.output_ids == results[0].output_ids
    odd = run(e, [GenRequest(3, prefix[:19] + [9], GREEDY)])[3]   # diverges inside the fifth block
    assert odd.cached_tokens == 16


def test_concurrent_sequences_share_prefix_blocks(tiny_model: Path) -> None:
    """Sequences admitted in one step after their prefix was computed hold the same blocks, not copies."""
    prefix = prompts(8)[7][:16]
    e = engine(tiny_model, max_running=8)
    run(e, [GenRequest(0, prefix + [40], SamplingParams(max_tokens=1, temperature=0.0))])
    tables = []
    requests = [GenRequest(i, prefix + [50 + i, 60 + i], SamplingParams(max_tokens=6, temperature=0.0))
                for i in range(1, 5)]
    stream = e.generate(requests)
    first = next(stream)
    used = e.num_blocks - e.blocks.free_blocks
    tables = list(stream)
    assert first.cached_tokens == 16 and all(r.cached_tokens == 16 for r in tables)
    # 4 shared prefix blocks + each sequence's own (2 + 6 tokens = 2 blocks): 4 + 3 x 2 once the first finished.
    assert used <= 4 + 3 * 2


def test_pulls_lazily(tiny_model: Path) -> None:
    max_running = 3
    e = engine(tiny_model, max_running=max_running)
    pulled: list[int] = []

    def stream():
        for i, p in enumerate(prompts(10)):
            pulled.append(i)
            yield GenRequest(i, p, SamplingParams(max_tokens=2 + i % 4, temperature=0.0))

    done = 0
    for _ in e.generate(stream()):
        done += 1
        assert len(pulled) - done <= max_running
    assert done == 10 and pulled == list(range(10))


def test_kv_pool_limits_admission(tiny_model: Path) -> None:
    """3 blocks of 4: a 5-token prompt takes 2 to start, so a second waits, pulled but not admitted."""
    e = engine(tiny_model, kv_capacity_tokens=12)
    assert e.kv_capacity_tokens() == 12
    pulled: list[int] = []

    def stream():
        for i in range(4):
            pulled.append(i)
            yield GenRequest(i, prompts(1, 3 * i)[0], SamplingParams(max_tokens=6, temperature=0.0))

    results = e.generate(stream())
    first = next(results)
    assert first.key == 0 and pulled == [0, 1]
    assert sorted([first.key, *(r.key for r in results)]) == [0, 1, 2, 3]


def test_capacity_follows_the_memory_budget(tiny_model: Path, monkeypatch) -> None:
    monkeypatch.setenv("BLENDSERVE_CPU_KV_GB", "0.001")
    e = CpuEngine(tiny_model, "tiny", threads=1, block_size=16, config=CpuEngineSettings())
    tokens = int(0.001 * 2**30) // e.model.kv_bytes_per_token()
    assert e.kv_capacity_tokens() == tokens // 16 * 16
    assert e.max_running == 256 and e.step_token_budget() == 1024


def test_smollm2_knows_paris(smollm2_checkpoint: Path) -> None:
    """On a fresh engine, and again after another chat left the chat template's prefix in the cache
    (the prefill then attends over cached K/V: a precision slip there once changed the answer),
    and once more prefilled in chunks of 7 beside another sequence's decode. The prompt is one whose
    greedy answer leads by >= 1.7 logits at every token: asked "What is the capital of France?", the
    first token's lead over "L" is 0.08, and bfloat16 paths that are each correct to rounding (the C++
    kernel against SDPA, AMX against AVX-512 matmuls) answered "L'Étoile, ..." on one machine."""
    tok = load_tokenizer(smollm2_checkpoint)

    def chat(question: str) -> list[int]:
        text = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                       add_generation_prompt=True)
        return tok(text, add_special_tokens=False)["input_ids"]

    paris = GenRequest(0, chat("Complete the sentence: The capital of France is"),
                       SamplingParams(max_tokens=30, temperature=0.0))
    result = next(CpuEngine(smollm2_checkpoint, "SmolLM2-135M-Instruct",
                            config=CpuEngineSettings()).generate([paris]))
    assert "Paris" in result.text
    assert result.finish_reason == "stop"

    e = CpuEngine(smollm2_checkpoint, "SmolLM2-135M-Instruct", config=CpuEngineSettings())
    run(e, [GenRequest(1, chat("Say hello."), SamplingParams(max_tokens=4, temperature=0.0))])
    cached = run(e, [paris])[0]
    assert cached.cached_tokens > 0
    assert cached.text == result.text

    chunked = CpuEngine(smollm2_checkpoint, "SmolLM2-135M-Instruct", step_tokens=7, config=CpuEngineSettings())
    mixed = run(chunked, [GenRequest(2, chat("Count to ten."), SamplingParams(max_tokens=30, temperature=0.0)), paris])
    assert mixed[0].text == result.text


def test_cancelled_requests_are_dropped(tiny_engine: CpuEngine) -> None:
    requests = [GenRequest(i, p, SamplingParams(max_tokens=2 if i == 0 else 20, temperature=0.0))
                for i, p in enumerate(prompts(4))]
    cancelled: set[int] = set()
    keys = []
    for result in tiny_engine.generate(requests, cancelled=cancelled.__contains__):
        keys.append(result.key)
        cancelled.add(1)  # cancelled after the first result, while it runs
    assert keys[0] == 0 and sorted(keys) == [0, 2, 3]
    assert tiny_engine.blocks.free_blocks == tiny_engine.num_blocks


def test_an_abandoned_stream_hands_its_blocks_back(tiny_engine: CpuEngine) -> None:
    stream = tiny_engine.generate([GenRequest(i, p, GREEDY) for i, p in enumerate(prompts(4))])
    next(stream)
    stream.close()
    assert tiny_engine.blocks.free_blocks == tiny_engine.num_blocks


def test_draw_follows_the_nucleus() -> None:
    probs = torch.tensor([0.5, 0.3, 0.2])
    gen = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.tensor([draw(probs, 1.0, gen) for _ in range(3000)]), minlength=3) / 3000
    torch.testing.assert_close(counts, probs, atol=0.04, rtol=0)
    # top_p 0.6: token 1 follows 0.5 of mass, within the nucleus; token 2 follows 0.8, outside.
    nucleus = torch.bincount(torch.tensor([draw(probs, 0.6, gen) for _ in range(3000)]), minlength=3) / 3000
    torch.testing.assert_close(nucleus, torch.tensor([0.625, 0.375, 0.0]), atol=0.04, rtol=0)
    flat = torch.full((1000,), 1e-3)  # the 64 likeliest hold too little: falls back to the whole vocabulary
    assert len({draw(flat, 0.5, gen) for _ in range(200)}) > 64


def test_default_dtype_follows_the_cpu(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nflags : fpu avx2 avx512f avx512_bf16\n")
    assert default_dtype(info) == torch.bfloat16
    info.write_text("processor : 0\nflags : fpu avx2 avx512f\n")
    assert default_dtype(info) == torch.float32
    assert default_dtype(tmp_path / "missing") == torch.float32
