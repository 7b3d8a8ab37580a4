"""Batch-invariant steps on the CPU engine: a token's logits do not depend on the other tokens of its step, on how
its prompt was cut into chunks or on what the prefix cache held, so greedy and seeded outputs repeat exactly."""
from __future__ import annotations

import random
from pathlib import Path

import torch

from blendserve.core.engine_settings import CpuEngineSettings
from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.cpu import CpuEngine
from blendserve.worker.engines.cpu.kv_cache import Chunk, KVPool, PagedAttention
from blendserve.worker.engines.cpu.model import Llama, row_blocked
from blendserve.worker.engines.cpu.native import paged_decode


def test_row_blocked_rows_do_not_depend_on_their_call() -> None:
    w = torch.randn(1536, 576, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    f = row_blocked(lambda x: x @ w.T)
    x = torch.randn(300, 576, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    alone = f(x[:1])
    for m in (2, 13, 32, 45, 100, 300):
        rows = torch.cat([x[1:m], x[:1]])                 # the row last, at every place within a block
        assert torch.equal(f(rows)[-1:], alone), m
    assert f(x[:45]).shape == (45, 1536) and f(x[:0]).shape == (0, 1536)


@torch.inference_mode()
def test_a_prompt_chunked_or_beside_others_gives_the_same_logits(smollm2_checkpoint: Path) -> None:
    """The real SmolLM2: one 45-token prefill, the same as 32 + 13 and 44 + 1 tokens, and beside another
    sequence in its step: the same last-token logits, bit for bit."""
    m = Llama(smollm2_checkpoint, torch.bfloat16, exact=True)
    kernel = paged_decode()
    ids = list(range(1000, 1045))
    table = list(range(4))

    def run(cuts: list[tuple[int, int]]) -> torch.Tensor:
        pool = KVPool(m.n_layers, m.n_kv_heads, m.head_dim, 16, 16, m.dtype)
        for start, n in cuts:
            attn = PagedAttention(pool, [Chunk(0, start, n, table)], m.head_dim ** -0.5, kernel, exact=True)
            out = m.forward(torch.tensor(ids[start:start + n]), torch.arange(start, start + n), attn,
                            torch.tensor([n - 1]))
        return out

    whole = run([(0, 45)])
    assert torch.equal(run([(0, 32), (32, 13)]), whole)
    assert torch.equal(run([(0, 44), (44, 1)]), whole)
    pool = KVPool(m.n_layers, m.n_kv_heads, m.head_dim, 16, 16, m.dtype)
    other = list(range(2000, 2030))
    attn = PagedAttention(pool, [Chunk(0, 0, 30, [8, 9]), Chunk(30, 0, 45, table)], m.head_dim ** -0.5, kernel,
                          exact=True)
    beside = m.forward(torch.tensor(other + ids), torch.cat([torch.arange(30), torch.arange(45)]), attn,
                       torch.tensor([29, 74]))
    assert torch.equal(beside[1:], whole)


def test_a_prompt_longer_than_a_step_runs(tiny_model: Path) -> None:
    """A prompt cut over several steps: the first steps sample nothing (an empty output projection)."""
    eng = CpuEngine(tiny_model, "tiny", threads=1, step_tokens=16, kv_capacity_tokens=4096,
                    config=CpuEngineSettings(exact=True))
    [r] = list(eng.generate([GenRequest(0, list(range(3, 60)), SamplingParams(max_tokens=3, temperature=0.0))]))
    assert len(r.output_ids) == 3


def test_seeded_and_greedy_requests_repeat_beside_any_batch(smollm2_checkpoint: Path) -> None:
    """Three seeded and three greedy requests, five times, each time beside another batch (none, a few, many;
    before or after them in the stream) and with the prefix cache as the runs before left it: every run
    gives the same tokens."""
    eng = CpuEngine(smollm2_checkpoint, "m", threads=2, kv_capacity_tokens=16384, config=CpuEngineSettings(exact=True))
    assert eng.exact
    rng = random.Random(0)
    probes = [[rng.randrange(1000, 40000) for _ in range(20 + 15 * i)] for i in range(3)]

    def others(k: int) -> list[GenRequest]:
        return [GenRequest(100 + j, [rng.randrange(1000, 40000) for _ in range(rng.randint(5, 120))],
                           SamplingParams(max_tokens=rng.randint(2, 12))) for j in range(k)]

    outs: dict[int, set[tuple[int, ...]]] = {i: set() for i in range(6)}
    for trial, k in enumerate((0, 3, 9, 1, 5)):
        mine = [GenRequest(i, p, SamplingParams(max_tokens=16, temperature=1.0, seed=5)) for i, p in enumerate(probes)]
        mine += [GenRequest(3 + i, p, SamplingParams(max_tokens=16, temperature=0.0)) for i, p in enumerate(probes)]
        stream = mine + others(k) if trial % 2 == 0 else others(k) + mine
        for r in eng.generate(stream):
            if r.key < 6:
                outs[r.key].add(tuple(r.output_ids))
    assert all(len(v) == 1 for v in outs.values()), {k: len(v) for k, v in outs.items()}
