"""Hypothesis strategies and brute-force references shared by the planner tests."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from blendserve.planner import perf
from blendserve.planner.workload import Workload

MODEL = perf.MODELS["llama-3.1-8b"]
GPU = perf.HARDWARE["a100-80gb"]


@st.composite
def prompt_lists(draw, max_n: int = 30, max_vocab: int = 6) -> list[list[int]]:
    """Prompts with real prefix structure: prefixes of a few bases plus short random tails.

    A tiny vocabulary makes accidental shared prefixes, identical prompts,
    prompts that are prefixes of others and empty prompts all common.
    """
    vocab = draw(st.integers(1, max_vocab))
    tok = st.integers(0, vocab - 1)
    bases = draw(st.lists(st.lists(tok, max_size=12), min_size=1, max_size=4))
    n = draw(st.integers(1, max_n))
    prompts = []
    for _ in range(n):
        base = draw(st.sampled_from(bases))
        cut = draw(st.integers(0, len(base)))
        prompts.append(base[:cut] + draw(st.lists(tok, max_size=4)))
    return prompts


@st.composite
def workloads(draw, max_n: int = 30) -> Workload:
    """A Workload over prompt_lists with output lengths from compute-dense to memory-dense."""
    prompts = draw(prompt_lists(max_n=max_n))
    outs = draw(st.lists(st.sampled_from([1, 2, 16, 300, 4000]), min_size=len(prompts), max_size=len(prompts)))
    return Workload.from_lists(prompts, 8192, outs)


def lcp(a: list[int], b: list[int]) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def prompts_of(w: Workload) -> list[list[int]]:
    return [w.tokens[w.offsets[i]:w.offsets[i + 1]].tolist() for i in range(w.n)]


def per_request(w: Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p = w.prompt_lens().astype(np.float64)
    return perf.comp_time(p, w.output_len, MODEL, GPU), perf.mem_time(p, w.output_len, MODEL, GPU), p
