"""Speculative decoding in the CPU engine: the same outputs as plain decoding, fewer steps, a sound KV cache.

The tiny random model rarely repeats its prompt, so besides prompt lookup
these tests also verify drafts from an *oracle* (the plain run's own output,
with some tokens corrupted): verification, the cuts at stops and the
rollback then run with long accepted runs on a model that takes a second to
load. One SmolLM2 test checks prompt lookup itself on a real rewrite prompt.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from blendserve.core.config import Settings
from blendserve.core.engine_settings import CpuEngineSettings, SpeculativeSettings, VllmSettings
from blendserve.core.modelstore import load_tokenizer
from blendserve.worker.engines import load_engine
from blendserve.worker.engines.base import GenRequest, GenResult, SamplingParams
from blendserve.worker.engines.cpu import CpuEngine
from blendserve.worker.engines.cpu.scheduler import Sequence
from blendserve.worker.engines.cpu.speculative import PromptLookup, SpecConfig
from blendserve.worker.engines.speculative import SpecConfig as SharedSpecConfig

NGRAM = SpecConfig("ngram", tokens=6, min_n=1, max_n=3)
OFF = SpecConfig("off")


def prompts(n: int, base: int = 10) -> list[list[int]]:
    return [[(base + 7 * i + j) % 500 + 3 for j in range(5 + 3 * i)] for i in range(n)]


def engine(tiny_model: Path, spec: SpecConfig, **kw) -> CpuEngine:
    args = dict(max_running=4, threads=1, block_size=4, kv_capacity_tokens=4096, dtype=torch.float32)
    return CpuEngine(tiny_model, "tiny", speculative=spec, config=CpuEngineSettings(), **{**args, **kw})


def run(e: CpuEngine, requests: list[GenRequest]) -> dict[int, GenResult]:
    results = {r.key: r for r in e.generate(requests)}
    assert sorted(results) == sorted(r.key for r in requests)
    return results


def with_oracle(e: CpuEngine, truth: dict[int, list[int]], k: int = 6) -> list[tuple[int, int]]:
    """Draft from the plain run's outputs (every third draft wrong at its third token); returns
    (output length before, tokens appended) for every verified chunk."""
    calls = {"n": 0}
    runs: list[tuple[int, int]] = []

    def oracle(seq: Sequence, most: int) -> list[int]:
        request = seq.state[0]
        most = min(most, k, request.params.max_tokens - len(seq.output) - 1)
        draft = list(truth[seq.key][len(seq.output):len(seq.output) + max(0, most)])
        calls["n"] += 1
        if calls["n"] % 3 == 0 and len(draft) >= 3:
            draft[2] = (draft[2] + 1) % 500 + 3
        return draft

    verify = e._verify

    def recorded(chunk, logits):
        before = len(chunk.seq.output)
        committed = verify(chunk, logits)
        runs.append((before, len(chunk.seq.output) - before))
        return committed

    e._draft, e._verify = oracle, recorded
    return runs


def test_prompt_lookup_proposes_what_followed_the_latest_match() -> None:
    lookup = PromptLookup(1, 3, k=4)
    tokens = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]
    assert lookup.propose(tokens, 4) == [7, 8, 5, 1]          # the latest "1 2 3", not the first
    assert lookup.propose(tokens + [4], 4) == []              # "3 4", "4" never seen: no draft
    assert PromptLookup(1, 3, k=4).propose([5, 6, 5], 4) == [6, 5]   # never its own suffix; cut at the end
    lookup.feedback(4, 1)
    assert lookup.limit == 2                                   # after a rejection: one past what was kept
    lookup.feedback(2, 2)
    lookup.feedback(4, 4)
    assert lookup.limit == 4                                   # doubles back, never past k
    lookup = PromptLookup(1, 3, k=4)                           # (tokens only grow in an engine)
    lookup.feedback(4, 0)                                      # rejected at once: no draft next step
    assert lookup.propose(tokens, 4) == [] and lookup.propose(tokens, 4) == [7]
    lookup.feedback(1, 0)                                      # again: two steps without
    assert [lookup.propose(tokens, 4) for _ in range(3)] == [[], [], [7]]
    lookup.feedback(1, 1)
    lookup.feedback(2, 0)                                      # an accepted token reset the pause
    assert [lookup.propose(tokens, 4) for _ in range(2)] == [[], [7]]


def test_switch_reads_the_environment_and_configures_vllm_and_sglang(monkeypatch) -> None:
    monkeypatch.delenv("BLENDSERVE_SPECULATIVE", raising=False)
    assert not SpecConfig.from_settings(SpeculativeSettings()).on
    assert SpecConfig.from_settings(SpeculativeSettings()).vllm() is None
    assert SpecConfig.from_settings(SpeculativeSettings()).sglang() == {}
    monkeypatch.setenv("BLENDSERVE_SPECULATIVE", "ngram")
    monkeypatch.setenv("BLENDSERVE_SPEC_TOKENS", "5")
    spec = SharedSpecConfig.from_settings(SpeculativeSettings())
    assert spec.on and spec.tokens == 5
    assert spec.vllm() == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2,
                           "prompt_lookup_max": 3}
    assert spec.sglang() == {"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 5}
    from blendserve.worker.engines.vllm import VllmOptions  # vLLM itself is not needed to build its arguments

    args = VllmOptions.from_settings(VllmSettings(), SpeculativeSettings()).engine_args(Path("/m"), "m")
    assert args["speculative_config"]["method"] == "ngram"
    monkeypatch.setenv("BLENDSERVE_SPECULATIVE", "off")
    off = VllmOptions.from_settings(VllmSettings(), SpeculativeSettings())
    assert "speculative_config" not in off.engine_args(Path("/m"), "m")
    monkeypatch.setenv("BLENDSERVE_SPECULATIVE", "eagle")            # a typo fails at start, not silently
    with pytest.raises(ValueError, match="ngram"):
        SpecConfig.from_settings(SpeculativeSettings())


def test_the_cpu_engine_speculates_by_default_in_small_steps_only(tiny_model: Path, monkeypatch) -> None:
    """Measured faster on rewrite and chat alike at a few running sequences, so on there by default; off
    when the deployment says so."""
    monkeypatch.delenv("BLENDSERVE_SPECULATIVE", raising=False)
    monkeypatch.delenv("BLENDSERVE_SPEC_MAX_RUNNING", raising=False)
    e = load_engine("cpu", tiny_model, "tiny", Settings(cpu=CpuEngineSettings(threads=1)))
    assert e.spec.on and e.spec.max_running == 4
    monkeypatch.setenv("BLENDSERVE_SPECULATIVE", "off")
    assert not load_engine("cpu", tiny_model, "tiny", Settings()).spec.on


def test_greedy_outputs_are_those_of_plain_decoding(tiny_model: Path) -> None:
    requests = [GenRequest(i, p * 2, SamplingParams(max_tokens=30, temperature=0.0)) for i, p in enumerate(prompts(5))]
    plain = run(engine(tiny_model, OFF), requests)
    e = engine(tiny_model, NGRAM)
    spec = run(e, requests)
    assert e.spec_stats.drafted > 0                           # prompt lookup did propose
    for key, result in plain.items():
        assert spec[key].output_ids == result.output_ids
        assert (spec[key].text, spec[key].finish_reason) == (result.text, result.finish_reason)
    assert e.blocks.free_blocks == e.num_blocks


def test_no_drafts_in_steps_of_more_sequences_than_the_limit(tiny_model: Path, monkeypatch) -> None:
    """With BLENDSERVE_SPEC_MAX_RUNNING=2, a step of three or four decoding sequences carries no draft;
    once two are left they draft again; every output still equals plain decoding's."""
    monkeypatch.setenv("BLENDSERVE_SPECULATIVE", "ngram")
    monkeypatch.setenv("BLENDSERVE_SPEC_MAX_RUNNING", "2")
    spec = SharedSpecConfig.from_settings(SpeculativeSettings())
    assert spec.max_running == 2
    requests = [GenRequest(i, p, SamplingParams(max_tokens=4 + 6 * i, temperature=0.0))
                for i, p in enumerate(prompts(4))]
    plain = run(engine(tiny_model, OFF), requests)
    e = engine(tiny_model, SpecConfig(spec.method, 3, 1, 3, spec.max_running))
    e._draft = lambda seq, most: [7] * min(2, most, seq.state[0].params.max_tokens - len(seq.output) - 1)
    e.step_log = []
    got = run(e, requests)
    sizes = [(len(s.chunks), s.draft_tokens) for s in e.step_log]
    assert all(drafts == 0 for n, drafts in sizes if n > 2)
    assert any(drafts > 0 for n, drafts in sizes if n <= 2)
    assert any(n > 2 for n, _ in sizes)
    for key, result in plain.items():
        assert got[key].output_ids == result.output_ids


def test_accepted_runs_save_steps_and_are_counted(tiny_model: Path) -> None:
    requests = [GenRequest(i, p, SamplingParams(max_tokens=40, temperature=0.0)) for i, p in enumerate(prompts(3))]
    off = engine(tiny_model, OFF, max_running=1)
    off.step_log = []
    plain = run(off, requests)
    e = engine(tiny_model, NGRAM, max_running=1)
    e.step_log = []
    runs = with_oracle(e, {k: r.output_ids for k, r in plain.items()})
    spec = run(e, requests)
    assert all(spec[k].output_ids == plain[k].output_ids for k in plain)
    stats = e.spec_stats
    assert stats.steps == len(runs) and 0 < stats.accepted < stats.drafted
    assert stats.accepted == sum(n - 1 for _, n in runs)    # every verified chunk adds its accepted run + 1
    assert max(n for _, n in runs) == 7                      # a whole draft of 6 and the bonus token
    assert len(e.step_log) < len(off.step_log) / 2
    assert sum(s.draft_tokens for s in e.step_log) == stats.drafted


def test_stops_cut_inside_an_accepted_run(tiny_model: Path) -> None:
    """A stop string, EOS or max_tokens that falls inside a run of accepted draft tokens ends the
    output exactly where plain decoding ends it."""
    prompt = prompts(1)[0]
    full = run(engine(tiny_model, OFF), [GenRequest(0, prompt, SamplingParams(max_tokens=40, temperature=0.0))])[0]
    e = engine(tiny_model, NGRAM)
    runs = with_oracle(e, {0: full.output_ids})
    run(e, [GenRequest(0, prompt, SamplingParams(max_tokens=40, temperature=0.0))])
    inside = [start + i for start, n in runs if n > 3 for i in range(1, n - 1)]   # neither first nor last of a run
    assert len(inside) >= 4
    tok = e.tokenizer
    for cut in inside[:4]:
        text = tok.decode(full.output_ids[:cut], skip_special_tokens=True)
        piece = tok.decode(full.output_ids[cut:cut + 1], skip_special_tokens=True)
        for params in (SamplingParams(max_tokens=cut + 1, temperature=0.0),
                       SamplingParams(max_tokens=40, temperature=0.0, stop=(text[-3:] + piece,))):
            request = GenRequest(1, prompt, params)
            plain = run(engine(tiny_model, OFF), [request])[1]
            s = engine(tiny_model, NGRAM)
            with_oracle(s, {1: full.output_ids})
            spec = run(s, [request])[1]
            assert (spec.output_ids, spec.text, spec.finish_reason) == \
                (plain.output_ids, plain.text, plain.finish_reason)
            assert len(plain.output_ids) <= cut + 1
        eos = engine(tiny_model, NGRAM)
        eos.eos = {full.output_ids[cut]}
        with_oracle(eos, {1: full.output_ids})
        out = run(eos, [GenRequest(1, prompt, SamplingParams(max_tokens=40, temperature=0.0))])[1]
        first = full.output_ids.index(full.output_ids[cut])
        assert out.output_ids == full.output_ids[:first + 1] and out.finish_reason == "stop"


def test_many_sequences_with_prefills_penalties_and_seeds(tiny_model: Path) -> None:
    """Eight sequences in steps of 16 tokens: drafts beside prefill chunks, greedy with penalties and
    seeded sampling among them; every output as in plain decoding, every block handed back."""
    params = [SamplingParams(max_tokens=24, temperature=0.0),
              SamplingParams(max_tokens=20, temperature=0.0, frequency_penalty=0.5),
              SamplingParams(max_tokens=18, temperature=0.8, seed=7),
              SamplingParams(max_tokens=22, temperature=0.0, logit_bias=((9, 3.0),))]
    requests = [GenRequest(i, p * 2, params[i % 4]) for i, p in enumerate(prompts(8, 31))]
    plain = run(engine(tiny_model, OFF, max_running=8, step_tokens=16), requests)
    e = engine(tiny_model, NGRAM, max_running=8, step_tokens=16)
    e.step_log = []
    runs = with_oracle(e, {k: r.output_ids for k, r in plain.items()})
    spec = run(e, requests)
    for key, result in plain.items():
        assert spec[key].output_ids == result.output_ids, key
    assert any(s.draft_tokens and s.prefill_tokens for s in e.step_log)
    assert all(s.prefill_tokens + s.decode_tokens + s.draft_tokens <= 16 for s in e.step_log)
    assert max(n for _, n in runs) > 3
    assert e.blocks.free_blocks == e.num_blocks


def test_prefix_cache_hits_after_speculative_sequences(tiny_model: Path) -> None:
    """Blocks a speculating sequence registered hold its committed tokens only: a follow-up whose
    prompt is the first prompt and answer hits them, and answers as a fresh engine does."""
    prompt = prompts(3)[2]
    first = GenRequest(0, prompt, SamplingParams(max_tokens=30, temperature=0.0))
    truth = run(engine(tiny_model, OFF), [first])[0].output_ids
    e = engine(tiny_model, NGRAM)
    with_oracle(e, {0: truth, 1: truth})
    answer = run(e, [first])[0].output_ids
    assert answer == truth and e.spec_stats.accepted > 0
    follow = GenRequest(1, prompt + answer + [7, 8], SamplingParams(max_tokens=10, temperature=0.0))
    again = run(e, [follow])[1]
    assert again.cached_tokens == (len(prompt) + len(answer) - 1) // 4 * 4   # every full committed block
    assert again.output_ids == run(engine(tiny_model, OFF), [follow])[1].output_ids


def test_smollm2_rewrite_accepts_most_drafts(smollm2_checkpoint: Path) -> None:
    """Prompt lookup on a real copy-edit prompt: most drafts accepted, output identical (float32)."""
    tok = load_tokenizer(smollm2_checkpoint)
    text = ("Copy the following text exactly:\n\nOn Monday, Alice repaired a red bicycle in Lisbon. "
            "On Friday, Bruno sold two old maps in Oslo. On Sunday, Chen packed a box of tea in Lima.")
    chat = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    request = GenRequest(0, tok(chat, add_special_tokens=False)["input_ids"],
                         SamplingParams(max_tokens=48, temperature=0.0, stop=("Lima",)))
    plain = next(CpuEngine(smollm2_checkpoint, "m", dtype=torch.float32, speculative=OFF,
                           config=CpuEngineSettings()).generate([request]))
    e = CpuEngine(smollm2_checkpoint, "m", dtype=torch.float32, speculative=SpecConfig("ngram"),
                  config=CpuEngineSettings())
    e.step_log = []
    spec = next(e.generate([request]))
    assert (spec.output_ids, spec.text) == (plain.output_ids, plain.text)
    assert "Chen packed" in spec.text
    assert e.spec_stats.acceptance > 0.5 and len(e.step_log) < len(spec.output_ids) / 2


def test_short_chunks_batched_attend_as_alone(tiny_model: Path) -> None:
    """Decodes and short multi-token chunks (a decode and its draft) of different lengths, batched in
    one padded group, give the logits that one causal SDPA per chunk gives."""
    from blendserve.worker.engines.cpu.kv_cache import Chunk, KVPool, PagedAttention
    from blendserve.worker.engines.cpu.model import Llama

    class Alone(PagedAttention):
        SHORT = 0

    model = Llama(tiny_model, torch.float32)
    seqs = prompts(4, 50)
    tables = [[4 * i + b for b in range(4)] for i in range(4)]
    spans = [(len(seqs[0]) - 3, 3), (len(seqs[1]) - 1, 1), (len(seqs[2]) - 6, 6), (len(seqs[3]) - 2, 2)]
    logits = []
    for kind in (PagedAttention, Alone):
        pool = KVPool(model.n_layers, model.n_kv_heads, model.head_dim, 16, 4)
        with torch.inference_mode():
            for s, t, (start, _) in zip(seqs, tables, spans):   # the cached prefixes
                model.forward(torch.tensor(s[:start]), torch.arange(start),
                              PagedAttention(pool, [Chunk(0, 0, start, t)], model.head_dim ** -0.5), torch.tensor([0]))
            ids, pos, chunks = [], [], []
            for s, t, (start, n) in zip(seqs, tables, spans):
                chunks.append(Chunk(len(ids), start, n, t))
                ids += s[start:start + n]
                pos += range(start, start + n)
            attn = kind(pool, chunks, model.head_dim ** -0.5)
            assert len(attn.prefills) == (0 if kind is PagedAttention else 4)
            logits.append(model.forward(torch.tensor(ids), torch.tensor(pos), attn, torch.arange(len(ids))))
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-4, atol=1e-4)
