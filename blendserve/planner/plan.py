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

from dataclasses import dataclass, field

import numpy as np

from . import baselines, perf
from .clock import PhaseClock
from .dualscan import dual_scan
from .lexsort import sort_prompts
from .partition import partition, piece_seconds
from .sharing import shared_prefix_tokens
from .split import split
from .tail import TAIL_SHARE, engine_clock_tail, short_finish
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


def _blend(tree: PrefixTree, totals: NodeTotals, per_request, d: np.ndarray, bound: np.ndarray, cap: np.ndarray,
           model: perf.ModelProfile, hw: perf.HardwareProfile, capacity: float, split_budget: float,
           step_tokens: int, ranks: int, balanced: bool, clock: PhaseClock,
           stats: dict) -> tuple[np.ndarray, np.ndarray]:
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
    _check_args(policy, ranks, step_tokens, step_fill)
    kv_capacity_bytes = _capacity(model, hw, kv_capacity_bytes)
    clock = PhaseClock()
    n = workload.n
    p = workload.prompt_lens().astype(np.float64)
    d = workload.output_len if workload.output_len is not None \
        else np.minimum(workload.max_tokens, PRIOR_OUTPUT_TOKENS).astype(np.float64)
    d = np.minimum(d, workload.max_tokens)
    bound = workload.max_tokens if workload.bound is None else workload.bound
    comp = perf.comp_time(p, d, model, hw)
    mem = perf.mem_time(p, d, model, hw)
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
        order, finish = _blend(tree, totals, (comp, mem, p), d, bound, workload.max_tokens, model, hw,
                               kv_capacity_bytes * ranks, split_budget, step_tokens, ranks, step_fill == "balanced",
                               clock, stats)
    else:
        order = baselines.fcfs(n) if policy == "fcfs" else baselines.dfs(tree) if policy == "dfs" \
            else baselines.balance(n, seed)
    pieces, sharing = _cut(tree, order, finish, p, d, mem, model, hw, ranks, stats)
    clock.lap("partition")
    stats["plan_seconds"] = dict(clock.seconds, total=sum(clock.seconds.values()))
    stats["plan_cpu_seconds"] = dict(clock.cpu, total=sum(clock.cpu.values()))
    full = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return Plan(full.astype(np.int64), [pc.astype(np.int64) for pc in pieces], sharing, stats)


def _check_args(policy: str, ranks: int, step_tokens: int, step_fill: str) -> None:
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {POLICIES}")
    if ranks < 1:
        raise ValueError("ranks must be >= 1")
    if step_tokens < 1:
        raise ValueError("step_tokens must be >= 1")
    if step_fill not in STEP_FILLS:
        raise ValueError(f"step_fill must be one of {STEP_FILLS}")


def _cut(tree: PrefixTree, order: np.ndarray, finish: np.ndarray, p: np.ndarray, d: np.ndarray, mem: np.ndarray,
         model: perf.ModelProfile, hw: perf.HardwareProfile, ranks: int,
         stats: dict) -> tuple[list[np.ndarray], float]:
    """One piece per rank, of equal estimated time with the prefix each request reuses in this order, each ending
    with its share of the finish; and the sharing ratio, per rank (each rank has its own prefix cache: only
    requests of the same rank count as earlier)."""
    full = np.concatenate([order, finish])
    reused = shared_prefix_tokens(tree, full)
    comp_eff = perf.comp_time(p[full] - reused, d[full], model, hw)
    k = len(order)
    cuts = partition(comp_eff[:k], mem[order], ranks)
    ends = partition(comp_eff[k:], mem[finish], ranks)
    pieces = [np.concatenate([order[cuts[r]:cuts[r + 1]], finish[ends[r]:ends[r + 1]]]) for r in range(ranks)]
    rank_seconds = piece_seconds(comp_eff[:k], mem[order], cuts) + piece_seconds(comp_eff[k:], mem[finish], ends)
    stats["rank_est_seconds"] = rank_seconds.tolist()
    mean = float(rank_seconds.mean()) if len(full) else 0.0
    stats["rank_imbalance"] = float(rank_seconds.max()) / mean - 1.0 if mean > 0 and ranks > 1 else 0.0
    shared = float(reused.sum()) if ranks == 1 else \
        sum(float(shared_prefix_tokens(tree, piece).sum()) for piece in pieces)
    total_tokens = float(p.sum())
    return pieces, shared / total_tokens if total_tokens > 0 else 0.0
