"""Synthetic planning workload for the planner benchmarks: realistic prefix structure, built with numpy.

Four request classes, mixed like the paper's traces: MMLU-like questions
behind a few shared few-shot prefixes, chat requests behind per-application
system prompts, unique prompts with no sharing, and short-prompt long
generations. Every prompt is a shared prefix (possibly empty) plus a unique
random suffix; everything is vectorised so 200M tokens build in seconds.
"""
from __future__ import annotations

import numpy as np

from blendserve.planner.arrayops import ragged_arange
from blendserve.planner.workload import Workload

VOCAB = 128_000

# class: (share of requests, number of shared prefixes, prefix len range, suffix mean, output mean, max_tokens)
CLASSES = {
    "mmlu": (0.25, 57, (400, 800), 90, 2, 16),
    "chat": (0.40, 24, (50, 600), 220, 400, 2048),
    "unique": (0.25, 0, (0, 0), 420, 30, 512),
    "longgen": (0.10, 4, (20, 60), 90, 4000, 16384),
}


def make_workload(n: int, seed: int = 0, scale: float = 1.0) -> Workload:
    """n requests; `scale` multiplies all lengths (1.0 gives ~500 prompt tokens a request)."""
    rng = np.random.default_rng(seed)
    names = list(CLASSES)
    share = np.array([CLASSES[c][0] for c in names])
    cls = rng.choice(len(names), size=n, p=share / share.sum())
    prefix_tokens = []
    prefix_base = []
    base = 0
    pid = np.full(n, -1, dtype=np.int64)
    suffix_len = np.zeros(n, dtype=np.int64)
    out_len = np.zeros(n, dtype=np.float64)
    max_tokens = np.zeros(n, dtype=np.int32)
    for ci, name in enumerate(names):
        _, n_prefix, (plo, phi), suf_mean, out_mean, mt = CLASSES[name]
        idx = np.flatnonzero(cls == ci)
        if n_prefix:
            first = len(prefix_base)
            for _ in range(n_prefix):
                length = int(rng.integers(plo, phi + 1) * scale)
                prefix_tokens.append(rng.integers(0, VOCAB, length, dtype=np.int32))
                prefix_base.append(base)
                base += length
            # Zipf-like popularity of the shared prefixes.
            pop = 1.0 / np.arange(1, n_prefix + 1)
            pid[idx] = first + rng.choice(n_prefix, size=len(idx), p=pop / pop.sum())
        suffix_len[idx] = np.maximum(1, rng.lognormal(np.log(suf_mean * scale), 0.6, len(idx))).astype(np.int64)
        out_len[idx] = np.minimum(mt, np.maximum(1, rng.lognormal(np.log(out_mean), 0.7, len(idx))))
        max_tokens[idx] = mt
    pool = np.concatenate(prefix_tokens) if prefix_tokens else np.zeros(0, dtype=np.int32)
    plen_of = np.array([len(p) for p in prefix_tokens] + [0], dtype=np.int64)
    pbase_of = np.array(prefix_base + [0], dtype=np.int64)
    plen = plen_of[pid]                       # pid -1 picks the trailing 0
    lens = plen + suffix_len
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    tokens = rng.integers(0, VOCAB, int(offsets[-1]), dtype=np.int32)
    # Overwrite each prompt's head with its shared prefix.
    within = ragged_arange(plen)
    dst = np.repeat(offsets[:-1], plen) + within
    src = np.repeat(pbase_of[pid], plen) + within
    tokens[dst] = pool[src]
    return Workload(tokens, offsets, max_tokens, out_len)
