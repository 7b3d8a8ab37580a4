"""plan(): from pending requests to per-rank admission orders, for BlendServe and the baselines.

BlendServe (docs/design.md §3): prefix tree -> layer-wise sort by density
-> conditional node split -> re-sort -> one dual scan with the memory of all
R ranks -> the long-bound tail placed on the engine's clock -> the finish
(known-short requests) set apart -> contiguous pieces of equal estimated
time, one per rank, each ending with its share of the finish. Each piece is
itself an interleaving of the two DFS streams in the proportion the scan
chose, so a rank runs it as is. The baselines share the tree (for the
sharing figure) and the partition.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from . import baselines, perf
from .dualscan import dual_scan
from .lexsort import sort_prompts
from .partition import partition, piece_seconds
from .sharing import shared_prefix_tokens
from .split import split
from .tree import NodeTotals, PrefixTree, layout
from .workload import Workload

POLICIES = ("fcfs", "dfs", "balance", "blendserve")
PRIOR_OUTPUT_TOKENS = 256
STEP_TOKENS = 2048      # default step token budget (decodes + chunked prefill): NanoFlow's dense batch, SGLang's chunk
STEP_FILLS = ("budget", "balanced")   # how an engine fills a step: see plan()


@dataclass
class Plan:
    order: np.ndarray              # int64 permutation of range(n): the admission order (rank-major when ranks>1)
    rank_orders: list[np.ndarray]  # per data-parallel rank, contiguous pieces of equal estimated time
    sharing_ratio: float           # fraction of prompt tokens an unbounded prefix cache need not recompute (per rank)
    stats: dict = field(default_factory=dict)   # plan_seconds (wall) and plan_cpu_seconds per phase, split, ranks


class _Clock:
    """Wall and CPU seconds per phase, for Plan.stats (CPU time is the figure that holds on a shared machine)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._t, self._c = time.perf_counter(), time.process_time()

    def lap(self, phase: str) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._t
        self.cpu[phase] = self.cpu.get(phase, 0.0) + cpu - self._c
        self._t, self._c = now, cpu


TAIL_SHARE = 0.1       # a request whose output bound is at least this share of the compute steps is the tail
SHORT_SHARE = 1 / 8    # short_finish: a cap at most this share of the longest other cap is known short


def _clocks(fresh: np.ndarray, d: np.ndarray, model: perf.ModelProfile, capacity: float,
            step_tokens: int) -> tuple[float, float]:
    """Engine steps of compute (tokens / step budget) and of KV pool (KV reads / pool) that the requests need."""
    kv_reads = float(np.sum(fresh * d + d * d / 2.0)) if len(d) else 0.0
    return float(np.sum(fresh) + np.sum(d)) / step_tokens, kv_reads * model.kv_bytes_per_token / capacity


def _tail_steps(fresh: np.ndarray, d: np.ndarray, step_tokens: int) -> float:
    """The run the tail is measured against: its compute steps (tokens / step_tokens, the budget of all
    ranks together) or the longest output, not the pool's.

    When KV reads are the longer clock the long generations *are* the run:
    measured against it, a 20K-token bound in a 400K-request trace whose
    pool clock is 220K steps would no longer count as tail, and the dual
    scan alone would place the generations that fill the pool (trace 4 at 400K,
    seed 2: 0.838 of T* against 0.900; BENCHMARKS.md, Planner).
    """
    return max((float(np.sum(fresh)) + float(np.sum(d))) / step_tokens, float(d.max(initial=0.0)), 1.0)


def tail_threshold(workload: Workload, *, ranks: int = 1, step_tokens: int = STEP_TOKENS) -> float:
    """The output bound from which a request may decode for TAIL_SHARE of the run's compute steps (judged from
    workload.output_len, estimates; _tail_steps): max(max_tokens, d) at or above it is the tail the plan
    places at its bounds (engine_clock_tail). With R data-parallel ranks each runs a R-th of the compute.

    The estimator keeps those requests' samples apart from the rest's
    (estimate.effective_output_lengths, strata): a 1% sample that catches
    two 16K-token generations among short chats must not lift the chats'
    lengths, or the rest's compute clock depends on what the sample caught.
    """
    d = np.minimum(workload.output_len, workload.max_tokens).astype(np.float64)
    return TAIL_SHARE * _tail_steps(workload.prompt_lens().astype(np.float64), d, step_tokens * ranks)


def _capacity(model: perf.ModelProfile, hw: perf.HardwareProfile, kv_capacity_bytes: float | None) -> float:
    """One rank's KV bytes: as given, or by default 90% of the device less the weights."""
    kv = hw.memory_bytes * 0.9 - model.weight_bytes() if kv_capacity_bytes is None else kv_capacity_bytes
    if kv <= 0:
        raise ValueError(f"{model.name} does not fit {hw.name}: pass kv_capacity_bytes for a TP group")
    return kv


def engine_clock_tail(order: np.ndarray, fresh: np.ndarray, d: np.ndarray, longest: np.ndarray,
                      pool_tokens: float, step_tokens: int, run_steps: float, stretch: bool) -> np.ndarray:
    """Place the tail (requests that may decode for TAIL_SHARE of the run or more) on the engine's clock.

    The tail starts on its KV pool clock, longest bound first; the rest keeps the scan's order on its
    compute clock, laid at the end of the tail's window or, with ``stretch``, over all of it
    (docs/design.md §3.7).

    Args:
        order: request ids in the dual scan's order.
        fresh, d, longest: per request id - prompt tokens the cache does not hold, the estimated
            output, and the bound max(max_tokens, d).
        pool_tokens, step_tokens: the engine's KV pool and step budget, in tokens.
        run_steps: the run's compute steps (``_tail_steps``).
        stretch: lay the rest over the whole window (memory-bound estimates or a balanced engine).

    Returns:
        The same ids, merged by clock; ``order`` itself when there is no tail.
    """
    is_tail = longest[order] >= TAIL_SHARE * run_steps
    if len(order) < 2 or not is_tail.any():
        return order
    tail, rest = order[is_tail], order[~is_tail]
    tail = tail[np.argsort(-longest[tail], kind="stable")]     # longest bound first (LPT), equal bounds in order
    bound = longest[tail]
    area = fresh[tail] * bound + bound * bound / 2.0
    before = np.cumsum(area) - area
    head = float(area[np.cumsum(fresh[tail] + bound) <= pool_tokens].sum())   # their peaks fit the empty pool
    starts = np.maximum(before - head, 0.0) / pool_tokens
    end = float(np.max(starts + bound))
    c = (fresh[rest] + d[rest]) / step_tokens
    total = float(c.sum())
    clock = np.cumsum(c) - c
    if stretch:
        clock *= max(end / total, 1.0) if total > 0 else 1.0
    else:
        clock += max(end - total, 0.0)
    keys = np.concatenate([starts, clock])
    return np.concatenate([tail, rest])[np.argsort(keys, kind="stable")]


def short_finish(order: np.ndarray, cap: np.ndarray, longest: np.ndarray, tokens: np.ndarray, tail_at: float,
                 ride: float) -> tuple[np.ndarray, np.ndarray]:
    """Split off the finish: the last requests in order whose max_tokens keeps them short, enough of them
    to keep the longest output any other request may still decode company.

    Arrays are indexed by request id: cap (the user's max_tokens), longest
    (the bound engine_clock_tail reads: at or above tail_at, the tail it
    places), tokens (what a request computes: fresh prompt + output). The
    engine admits in order, so a request admitted last decodes after the
    rest has left: a chat capped at 8192 that writes 8000 tokens decodes
    alone for 8000 steps, each reading all the weights for one token. No
    estimate names that chat (its siblings average 500 tokens, so its cap
    is loose and it is not the tail), but its cap bounds the drain: W steps,
    the longest cap of the rest. Requests capped at W x SHORT_SHARE or less
    (MMLU's answers under a cap of 256) are known short; W x `ride` tokens of
    them (ride: the tokens that fit in the weight read of one step of every
    rank, perf.idle_step_tokens x R) cost nothing in those W steps. Taking
    more takes the blend's compute-dense partner out of the middle: a block
    of W full steps cost 3.5% on a prefill-heavy file (BENCHMARKS.md,
    Planner). The tail is on neither side: engine_clock_tail starts it
    early on its own clock. Returns (the order without the finish, the
    finish), both in order; every rank ends with its share of the finish.
    """
    rest = longest[order] < tail_at
    window = float(cap[order][rest].max(initial=0))
    short = rest & (cap[order] <= SHORT_SHARE * window)
    work = np.where(short, tokens[order], 0.0)
    after = np.cumsum(work[::-1])[::-1] - work          # known-short tokens behind each position
    pick = short & (after < window * ride)
    return order[~pick], order[pick]


def _blend(tree: PrefixTree, totals: NodeTotals, per_request, d: np.ndarray, bound: np.ndarray, cap: np.ndarray,
           model: perf.ModelProfile, hw: perf.HardwareProfile, capacity: float, split_budget: float,
           step_tokens: int, ranks: int, balanced: bool, clock: _Clock, stats: dict) -> tuple[np.ndarray, np.ndarray]:
    """BlendServe's admission order: split, re-sort, dual scan with `capacity` bytes of KV, the tail placed;
    returned as (order, finish): the known-short requests every rank ends with (short_finish)."""
    s = split(tree, totals, per_request, budget_fraction=split_budget)
    stats.update(split_cut_nodes=int(len(s.cut)), split_moved_leaves=s.moved_leaves,
                 split_recompute_tokens=float(s.recompute_tokens), split_budget_tokens=float(s.budget_tokens))
    clock.lap("split")
    seq, _ = layout(s.parent, s.totals.rho, s.totals.count, tree.n_internal)
    req = tree.order[seq]
    shared = np.zeros(len(seq), dtype=np.int64)
    if len(seq) > 1:
        shared[1:] = tree.lcp_between(seq[:-1], seq[1:])
    rho_t = float(s.totals.rho[0])
    stats["rho_root"] = rho_t
    clock.lap("layout")
    comp, mem, p = per_request
    fresh = p[req] - shared                    # the part of each prompt the cache does not hold
    scan = dual_scan(comp[req], mem[req], p[req], shared, perf.kv_bytes_held(fresh, d[req], model),
                     d[req] + fresh / step_tokens, capacity, rho_t)
    stats["left_fraction"] = float(np.mean(scan.side == 0)) if len(scan.side) else 0.0
    clock.lap("dual_scan")
    order = req[scan.order]
    fresh_id = np.zeros(len(d), dtype=np.float64)
    fresh_id[req] = fresh
    longest = np.maximum(bound.astype(np.float64), d)
    stats["tail_steps"] = _tail_steps(fresh, d[req], step_tokens * ranks)
    compute_steps, pool_steps = _clocks(fresh, d[req], model, capacity, step_tokens)
    order = engine_clock_tail(order, fresh_id, d, longest, capacity / model.kv_bytes_per_token, step_tokens,
                              stats["tail_steps"], stretch=balanced or pool_steps > compute_steps)
    clock.lap("tail")
    order, finish = short_finish(order, cap, longest, fresh_id + d, TAIL_SHARE * stats["tail_steps"],
                                 perf.idle_step_tokens(model, hw) * ranks)
    stats["finish_requests"] = len(finish)
    clock.lap("short_finish")
    return order, finish


def prefill_only(tree: PrefixTree, prompt_lens: np.ndarray) -> np.ndarray:
    """The order of work that decodes nothing (embeddings): shortest prompt first, DFS order among equals
    (docs/design.md §3.13).

    With no decode there is nothing for a blend to overlap: every step is
    compute. What the order still decides is how much of that compute is
    padding. An encoder (BERT) runs its inputs as padded batches of like
    length, so inputs of one length side by side pad least (sentence-
    transformers sorts its whole input list by length for the same reason);
    an engine that packs ragged batches loses nothing by it. Encoders attend
    both ways, so no prefix is reused across inputs; the DFS order among
    inputs of one length keeps a decoder-based embedder's shared prefixes
    adjacent all the same.
    """
    dfs = baselines.dfs(tree)
    return dfs[np.argsort(prompt_lens[dfs], kind="stable")]


def plan(workload: Workload, model: perf.ModelProfile, hw: perf.HardwareProfile, policy: str = "blendserve", *,
         kv_capacity_bytes: float | None = None, ranks: int = 1, split_budget: float = 0.01,
         step_tokens: int = STEP_TOKENS, step_fill: str = "budget", seed: int = 0) -> Plan:
    """Admission order(s) for the pending requests of one model under `policy`.

    Output lengths come from workload.output_len (estimates are fine); where
    it is None a prior of min(max_tokens, 256) is used. The tail is placed at
    workload.bound (max_tokens where None); BlendServe's pieces end with the
    requests whose max_tokens keeps them short (short_finish). kv_capacity_bytes is
    one rank's KV memory, by default 90% of the device less the weights.
    step_tokens is the engine's token budget per step (decodes + prefill
    chunk): the blend paces prefills to it. step_fill says how the engine
    fills a step: "budget" (to step_tokens whenever it has prefill: vLLM,
    SGLang, NanoFlow) or "balanced" (only the tokens that hide under the
    step's KV reads; the simulator's EngineConfig.step_fill).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {POLICIES}")
    if ranks < 1:
        raise ValueError("ranks must be >= 1")
    if step_tokens < 1:
        raise ValueError("step_tokens must be >= 1")
    if step_fill not in STEP_FILLS:
        raise ValueError(f"step_fill must be one of {STEP_FILLS}")
    kv_capacity_bytes = _capacity(model, hw, kv_capacity_bytes)
    clock = _Clock()
    n = workload.n
    p = workload.prompt_lens().astype(np.float64)
    d = workload.output_len if workload.output_len is not None \
        else np.minimum(workload.max_tokens, PRIOR_OUTPUT_TOKENS).astype(np.float64)
    d = np.minimum(d, workload.max_tokens)
    bound = workload.max_tokens if workload.bound is None else workload.bound
    comp = perf.comp_time(p, d, model, hw)
    mem = perf.mem_time(p, d, model, hw)
    per_request = (comp, mem, p)
    stats: dict = {"policy": policy, "requests": n, "ranks": ranks, "kv_capacity_bytes": float(kv_capacity_bytes),
                   "step_tokens": step_tokens}

    order_lex, lcp = sort_prompts(workload.tokens, workload.offsets)
    clock.lap("sort")
    tree = PrefixTree.from_sorted(order_lex, lcp, p[order_lex].astype(np.int64))
    totals = NodeTotals.annotate(tree, comp, mem, p)
    stats["sharing_dfs"] = float(totals.sharing[0]) if n else 0.0
    clock.lap("tree")

    finish = np.zeros(0, dtype=np.int64)     # BlendServe's known-short requests, a share at the end of each rank
    if policy == "blendserve" and n and not workload.max_tokens.any():
        order = prefill_only(tree, p)
        stats["prefill_only"] = True
    elif policy == "blendserve":
        order, finish = _blend(tree, totals, per_request, d, bound, workload.max_tokens, model, hw,
                               kv_capacity_bytes * ranks, split_budget, step_tokens, ranks, step_fill == "balanced",
                               clock, stats)
    elif policy == "fcfs":
        order = baselines.fcfs(n)
    elif policy == "dfs":
        order = baselines.dfs(tree)
    else:
        order = baselines.balance(n, seed)

    # Per-request time with the prefix each reuses in this order, for an even cut of the order and of its finish.
    full = np.concatenate([order, finish])
    reused = shared_prefix_tokens(tree, full)
    comp_eff = perf.comp_time(p[full] - reused, d[full], model, hw)
    k = len(order)
    cuts = partition(comp_eff[:k], mem[order], ranks)
    ends = partition(comp_eff[k:], mem[finish], ranks)
    pieces = [np.concatenate([order[cuts[r]:cuts[r + 1]], finish[ends[r]:ends[r + 1]]]) for r in range(ranks)]
    rank_seconds = piece_seconds(comp_eff[:k], mem[order], cuts) + piece_seconds(comp_eff[k:], mem[finish], ends)
    stats["rank_est_seconds"] = rank_seconds.tolist()
    mean = float(rank_seconds.mean()) if n else 0.0
    stats["rank_imbalance"] = float(rank_seconds.max()) / mean - 1.0 if mean > 0 and ranks > 1 else 0.0
    clock.lap("partition")

    # Each rank has its own prefix cache: only requests of the same rank count as earlier.
    shared = float(reused.sum()) if ranks == 1 else \
        sum(float(shared_prefix_tokens(tree, piece).sum()) for piece in pieces)
    total_tokens = float(p.sum())
    sharing = shared / total_tokens if total_tokens > 0 else 0.0
    clock.lap("sharing")
    stats["plan_seconds"] = dict(clock.seconds, total=sum(clock.seconds.values()))
    stats["plan_cpu_seconds"] = dict(clock.cpu, total=sum(clock.cpu.values()))
    full = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return Plan(full.astype(np.int64), [pc.astype(np.int64) for pc in pieces], sharing, stats)
