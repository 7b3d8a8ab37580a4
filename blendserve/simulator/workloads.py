"""Synthetic workloads shaped like the paper's (docs/design.md §3.12).

Each request type is a length model (lognormal prompt and output lengths with
the paper's means) and a prefix model (a fraction of requests open with one of
a pool of shared prefixes: an application's system prompt, an MMLU subject's
few-shot examples). Prefix tokens are what make sharing real: the simulator's
radix cache and the planner's tree both see them as identical token runs.

Traces #1-#4 and the sensitivity grid blend BurstGPT (compute-dense, little
sharing), MMLU (compute-dense, heavy sharing) and OpenVid (memory-dense) in
the proportions that hit a target density rho = (1 - s) Comp / Mem and a
target DFS sharing s. Proportions come from a 3x3 linear solve on the
per-request means of the very streams that are then used (a fixed point of a
few iterations), so the targets hold for the requests actually drawn.

By default no token marks a request's dataset (`lead` = 0), as in the
paper's traces, whose datasets share no marker: a prefix-sorted (DFS) order
then interleaves the unshared requests of all datasets in token-id order,
and neither the planner nor its output-length estimates can tell an
OpenVid prompt from a BurstGPT one by anything but shared prefixes. With
`lead` > 0 every prompt of a type opens with the type's own lead token(s)
(a chat template, "The video shows ..."), so DFS runs the datasets one after
another (its worst case) and the estimator can group a dataset's requests.

The file order (what FCFS runs) is a sequence of jobs: each type's requests
are cut into a few contiguous jobs and the jobs are shuffled, as when several
users upload batch files. Token ids are uniform over a Llama-3-sized vocab;
all token arrays are built with numpy, never a Python loop per token.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from blendserve.planner.perf import HARDWARE, MODELS, HardwareProfile, ModelProfile, comp_time, mem_time
from blendserve.planner.workload import Workload
from blendserve.simulator.ragged import offsets_of, ragged_arange

VOCAB = 128_256
JOBS_PER_TYPE = 4


@dataclass(frozen=True)
class RequestType:
    """Length and prefix model of one dataset. Means are in tokens."""
    name: str
    suffix_mean: float            # unique part of the prompt
    suffix_sigma: float           # lognormal sigma (0: constant)
    output_mean: float           # before the max_tokens cap (BurstGPT: 28 gives a capped mean of 27)
    output_sigma: float
    max_tokens: int
    prefix_fraction: float = 0.0  # requests that open with a shared prefix
    prefix_mean: float = 0.0
    prefix_sigma: float = 0.25
    prefix_pool: int = 1          # distinct shared prefixes
    pool_zipf: float = 0.0        # 0: uniform choice over the pool, else Zipf exponent (few popular apps)
    header: int = 0               # tokens common to every prefix of the type (e.g. MMLU's instruction line)
    lead: int = 0                 # tokens that open every prompt of the type (a dataset marker; none by default)


# Means follow docs/design.md §3.12 (the paper's Table 4). Prefix fraction x prefix mean /
# prompt mean gives the sharing; output spreads are wide where the source is
# heavy-tailed (chat), narrow where lengths are near fixed (MMLU, video tokens).
TYPES: dict[str, RequestType] = {
    "burstgpt": RequestType("burstgpt", 239.0, 0.9, 28.0, 1.65, 1024,
                            prefix_fraction=0.3, prefix_mean=16.0, prefix_pool=20, pool_zipf=1.1),
    "mmlu": RequestType("mmlu", 109.0, 0.45, 2.0, 0.0, 4,
                        prefix_fraction=1.0, prefix_mean=695.0, prefix_sigma=0.2, prefix_pool=57, header=12),
    "openvid": RequestType("openvid", 121.0, 0.35, 16000.0, 0.12, 20000),
    "wildchat": RequestType("wildchat", 402.0, 1.0, 510.0, 0.4, 4096,
                            prefix_fraction=0.4, prefix_mean=236.0, prefix_pool=200, pool_zipf=1.0),
    "sharegpt": RequestType("sharegpt", 294.0, 1.0, 350.0, 0.5, 4096,
                            prefix_fraction=0.2, prefix_mean=30.0, prefix_pool=50, pool_zipf=1.0),
    "azure": RequestType("azure", 2483.0, 0.6, 23.0, 0.8, 1024,
                         prefix_fraction=0.1, prefix_mean=250.0, prefix_pool=20, pool_zipf=1.0),
}

TRACES: dict[str, tuple[float, float]] = {   # name -> (rho, sharing); BurstGPT + MMLU + OpenVid
    "trace1": (1.4, 0.35),
    "trace2": (1.4, 0.05),
    "trace3": (0.9, 0.35),
    "trace4": (0.9, 0.05),
}
TRACE_TYPES = ("burstgpt", "mmlu", "openvid")
GRID_RHO = tuple(round(0.80 + 0.05 * i, 2) for i in range(13))
GRID_SHARING = tuple(round(0.05 + 0.10 * i, 2) for i in range(5))


def grid_names() -> list[str]:
    """The 65 workloads of the sensitivity grid, as preset names."""
    return [f"grid-r{r:.2f}-s{s:.2f}" for r in GRID_RHO for s in GRID_SHARING]


def preset_names() -> list[str]:
    return [*TRACES, "grid", *TYPES]


def expand(name: str) -> list[str]:
    """A preset name, or 'grid' for all 65 grid workloads."""
    return grid_names() if name == "grid" else [name]


@dataclass
class _Stream:
    """Lengths and prefix choices of one type's requests (no tokens yet)."""
    kind: RequestType
    prefix_id: np.ndarray     # int64 [n], -1 = none
    pool_lens: np.ndarray     # int64 [pool]
    suffix: np.ndarray        # int64 [n]
    output: np.ndarray        # int64 [n]

    @property
    def prompt(self) -> np.ndarray:
        return self.suffix + np.where(self.prefix_id >= 0, self.pool_lens[np.maximum(self.prefix_id, 0)], 0)

    def shared(self) -> np.ndarray:
        """Prompt tokens each request shares with an earlier one of the stream (its DFS saving)."""
        out = np.minimum(np.full(len(self.prefix_id), self.kind.lead, dtype=np.int64), self.prompt)
        if len(out):
            out[0] = 0
        has = np.flatnonzero(self.prefix_id >= 0)
        if len(has):
            _, first = np.unique(self.prefix_id[has], return_index=True)
            repeat = np.ones(len(has), dtype=bool)
            repeat[first] = False
            out[has[repeat]] = self.pool_lens[self.prefix_id[has[repeat]]]
        return out

    def head(self, k: int) -> _Stream:
        return _Stream(self.kind, self.prefix_id[:k], self.pool_lens, self.suffix[:k], self.output[:k])


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, n: int) -> np.ndarray:
    if sigma == 0 or mean <= 0:
        return np.full(n, mean)
    return rng.lognormal(np.log(mean) - sigma * sigma / 2.0, sigma, n)


def _draw(kind: RequestType, n: int, rng: np.random.Generator) -> _Stream:
    pool = max(kind.prefix_pool, 1)
    pool_lens = np.maximum(np.rint(_lognormal(rng, kind.prefix_mean, kind.prefix_sigma, pool)), kind.header + 1)
    if kind.pool_zipf > 0:
        weights = 1.0 / np.arange(1, pool + 1) ** kind.pool_zipf
        pid = rng.choice(pool, size=n, p=weights / weights.sum())
    else:
        pid = rng.integers(0, pool, n)
    pid = np.where(rng.random(n) < kind.prefix_fraction, pid, -1)
    suffix = np.maximum(np.rint(_lognormal(rng, kind.suffix_mean, kind.suffix_sigma, n)), 1)
    output = np.clip(np.rint(_lognormal(rng, kind.output_mean, kind.output_sigma, n)), 1, kind.max_tokens)
    return _Stream(kind, pid.astype(np.int64), pool_lens.astype(np.int64), suffix.astype(np.int64),
                   output.astype(np.int64))


def _assemble(streams: list[_Stream], rng: np.random.Generator) -> Workload:
    """Token arrays for the streams, in job-shuffled file order."""
    pool_base = offsets_of([len(s.pool_lens) for s in streams])
    pool_lens = np.concatenate([s.pool_lens for s in streams])
    pool_off = offsets_of(pool_lens)
    pool_tokens = rng.integers(0, VOCAB, int(pool_off[-1]), dtype=np.int32)
    for s, base in zip(streams, pool_base[:-1]):
        if s.kind.header:                                  # one instruction line common to the type's prefixes
            h = s.kind.header
            starts = pool_off[base:base + len(s.pool_lens)]
            pool_tokens[(starts[:, None] + np.arange(h)).ravel()] = np.tile(pool_tokens[starts[0]:starts[0] + h],
                                                                            len(starts))

    jobs = [(t, part) for t, s in enumerate(streams)
            for part in np.array_split(np.arange(len(s.suffix)), JOBS_PER_TYPE) if len(part)]
    jobs = [jobs[j] for j in rng.permutation(len(jobs))]
    pid = np.concatenate([np.where(streams[t].prefix_id[i] >= 0, streams[t].prefix_id[i] + pool_base[t], -1)
                          for t, i in jobs]) if jobs else np.zeros(0, np.int64)
    suffix = np.concatenate([streams[t].suffix[i] for t, i in jobs]) if jobs else np.zeros(0, np.int64)
    output = np.concatenate([streams[t].output[i] for t, i in jobs]) if jobs else np.zeros(0, np.int64)
    max_tokens = np.concatenate([np.full(len(i), streams[t].kind.max_tokens) for t, i in jobs]) if jobs \
        else np.zeros(0, np.int64)

    plen = np.where(pid >= 0, pool_lens[np.maximum(pid, 0)], 0)
    offsets = offsets_of(plen + suffix)
    tokens = rng.integers(0, VOCAB, int(offsets[-1]), dtype=np.int32)
    with_prefix = np.flatnonzero(plen)
    within = ragged_arange(plen[with_prefix])
    dst = np.repeat(offsets[with_prefix], plen[with_prefix]) + within
    src = np.repeat(pool_off[pid[with_prefix]], plen[with_prefix]) + within
    tokens[dst] = pool_tokens[src]
    kind_of = np.concatenate([np.full(len(i), t) for t, i in jobs]) if jobs else np.zeros(0, np.int64)
    lead = np.minimum(np.array([s.kind.lead for s in streams])[kind_of], plen + suffix)
    lead_tokens = rng.integers(0, VOCAB, (len(streams), int(lead.max(initial=0))), dtype=np.int32)
    within = ragged_arange(lead)
    tokens[np.repeat(offsets[:-1], lead) + within] = lead_tokens[np.repeat(kind_of, lead), within]
    return Workload(tokens, offsets, max_tokens.astype(np.int32), output.astype(np.float64))


def _solve_counts(streams: list[_Stream], n: int, rho: float, sharing: float,
                  model: ModelProfile, hw: HardwareProfile) -> np.ndarray:
    """Counts of the three streams' heads that hit (rho, sharing) with n requests in all."""
    counts = np.full(3, n / 3.0)
    for _ in range(8):   # per-request means depend on the heads used: iterate to a fixed point
        rows = []
        for s, k in zip(streams, np.maximum(np.rint(counts).astype(int), 1)):
            h = s.head(k)
            p, d = h.prompt, h.output
            rows.append((comp_time(p, d, model, hw).mean(), mem_time(p, d, model, hw).mean(),
                         p.mean(), h.shared().mean()))
        c, m, t, sh = np.array(rows).T
        a = np.array([sh - sharing * t, (1.0 - sharing) * c - rho * m, np.ones(3)])
        new = np.linalg.solve(a, [0.0, 0.0, float(n)])
        if np.any(new < -0.5):
            raise ValueError(f"rho={rho}, sharing={sharing} cannot be reached by mixing {n} requests of "
                             f"{', '.join(s.kind.name for s in streams)} (unreachable targets, or too few "
                             "requests: mixes need a few thousand)")
        if np.allclose(new, counts, atol=0.5):
            break
        counts = new
    out = np.maximum(np.rint(counts).astype(np.int64), 0)
    out[np.argmax(out)] += n - out.sum()
    return out


def _kind(name: str, lead: int) -> RequestType:
    return replace(TYPES[name], lead=lead)


def mixed(types: tuple[str, str, str], n: int, rho: float, sharing: float, *, seed: int = 0,
          model: ModelProfile = MODELS["llama-3.1-8b"], hw: HardwareProfile = HARDWARE["a100-80gb"],
          lead: int = 0) -> Workload:
    """n requests of three types blended to density rho and DFS sharing `sharing` on (model, hw)."""
    rng = np.random.default_rng(seed)
    streams = [_draw(_kind(t, lead), n, rng) for t in types]
    counts = _solve_counts(streams, n, rho, sharing, model, hw)
    return _assemble([s.head(int(k)) for s, k in zip(streams, counts)], rng)


def single(kind: str, n: int, *, seed: int = 0, lead: int = 0) -> Workload:
    """n requests of one type."""
    rng = np.random.default_rng(seed)
    return _assemble([_draw(_kind(kind, lead), n, rng)], rng)


def generate(name: str, n: int, *, seed: int = 0, model: ModelProfile = MODELS["llama-3.1-8b"],
             hw: HardwareProfile = HARDWARE["a100-80gb"], lead: int = 0) -> Workload:
    """The named preset with n requests: trace1-4, grid-r<rho>-s<sharing>, or a request type.

    lead: tokens of a per-dataset marker opening every prompt (0: none, the default; see the module doc).
    """
    if n < 1:
        raise ValueError("a workload needs at least one request")
    if lead < 0:
        raise ValueError("lead must be >= 0")
    if name in TRACES:
        return mixed(TRACE_TYPES, n, *TRACES[name], seed=seed, model=model, hw=hw, lead=lead)
    if name in TYPES:
        return single(name, n, seed=seed, lead=lead)
    if name.startswith("grid-r") and "-s" in name:
        try:
            rho, sharing = (float(x) for x in name[len("grid-r"):].split("-s"))
        except ValueError:
            raise ValueError(f"bad grid workload name {name!r}: use grid-r<rho>-s<sharing>") from None
        return mixed(TRACE_TYPES, n, rho, sharing, seed=seed, model=model, hw=hw, lead=lead)
    raise ValueError(f"unknown workload {name!r}; presets: {', '.join(preset_names())}, grid-r<rho>-s<sharing>")


def density(w: Workload, sharing: float, model: ModelProfile, hw: HardwareProfile) -> float:
    """rho(R) = (1 - s) Comp(R) / Mem(R) of a workload with true output lengths."""
    p, d = w.prompt_lens(), np.minimum(w.output_len, w.max_tokens)
    return (1.0 - sharing) * float(comp_time(p, d, model, hw).sum()) / float(mem_time(p, d, model, hw).sum())
