"""Plan a workload under each policy, simulate every order, and score it against the optimum.

The glue between the planner (blendserve.planner.plan) and the simulator; the
CLI and the benchmarks both call run_workload so they measure the same thing.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from blendserve.planner import (
    PrefixTree,
    Workload,
    effective_output_lengths,
    plan,
    sharing_ratio,
    tail_split_lengths,
    tail_threshold,
    warmup_sample,
)
from blendserve.planner.perf import HardwareProfile, ModelProfile
from blendserve.simulator.engine import EngineConfig, SimResult, output_lengths, simulate
from blendserve.simulator.optimum import Optimum, engine_bound, ideal, optimum
from blendserve.simulator.prefix import build_prefix_trie, dfs_sharing_ratio
from blendserve.simulator.workloads import density

LENGTH_MODES = ("estimate", "oracle")
WARMUP_FRACTION = 0.01
SPLIT_TAIL_SAMPLES = True   # the long-bound requests' samples kept apart (estimate.effective_output_lengths, strata)


@dataclass
class PolicyRun:
    policy: str
    plan_seconds: float
    plan_sharing: float          # the planner's own figure (unbounded cache)
    result: SimResult | None     # None with plan_only
    dfs_direction: str = ""      # DFS only: "ascending" or "descending", whichever simulated faster
    plan_cpu_seconds: float = 0.0   # CPU time of planning: the figure that holds on a shared machine


@dataclass
class WorkloadRun:
    name: str
    requests: int
    density: float
    dfs_sharing: float
    optimum: Optimum             # T* (docs/design.md §3.2): the optimum with the per-step weight reads
    bound: Optimum               # engine_bound: what the simulated engine allows any order
    ideal: Optimum               # T_o: the optimum without weight reads (the paper's)
    overlap: str = "nanoflow"
    step_tokens: int = 2048
    step_fill: str = "budget"
    runs: dict[str, PolicyRun] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The issue's JSON shape, plus a few diagnostics (extra keys only)."""
        policies = {}
        for name, run in self.runs.items():
            r = run.result
            sharing = r.sharing_ratio if r else run.plan_sharing
            policies[name] = {
                "tokens_per_s": r.tokens_per_s if r else None,
                "fraction_of_optimal": r.tokens_per_s / self.optimum.tokens_per_s if r else None,
                "sharing_ratio": sharing,
                "sharing_vs_dfs": sharing / self.dfs_sharing if self.dfs_sharing > 0 else 1.0,
                "plan_seconds": run.plan_seconds,
                "plan_cpu_seconds": run.plan_cpu_seconds,
                "simulated_seconds": r.seconds if r else None,
                "preemptions": r.preemptions if r else None,
                "fraction_of_engine_bound": r.tokens_per_s / self.bound.tokens_per_s if r else None,
                "fraction_of_ideal": r.tokens_per_s / self.ideal.tokens_per_s if r else None,
                "compute_utilisation": r.comp_seconds / r.seconds if r else None,
                "memory_utilisation": r.mem_seconds / r.seconds if r else None,
            }
            if run.dfs_direction:
                policies[name]["dfs_direction"] = run.dfs_direction
        return {"name": self.name, "requests": self.requests, "optimal_tokens_per_s": self.optimum.tokens_per_s,
                "engine_bound_tokens_per_s": self.bound.tokens_per_s, "ideal_tokens_per_s": self.ideal.tokens_per_s,
                "overlap": self.overlap, "step_tokens": self.step_tokens, "step_fill": self.step_fill,
                "density": self.density, "dfs_sharing_ratio": self.dfs_sharing, "policies": policies}


def _blendserve_estimated(w: Workload, model: ModelProfile, hw: HardwareProfile, kv_bytes: float,
                          config: EngineConfig, seed: int) -> tuple[np.ndarray, float]:
    """Warm-up sample first (its true lengths observed), then BlendServe on estimates for the rest.

    The estimates are effective lengths (estimate.effective_output_lengths):
    a subtree's expected KV reads, not its mean length, so that a band
    hiding a few long generations is planned as the memory it holds. With
    SPLIT_TAIL_SAMPLES the samples of long-bound requests (plan.tail_threshold,
    judged on a first estimate) inform only the long-bound requests.
    """
    true = output_lengths(w).astype(np.float64)
    tree = PrefixTree.build(w)               # one tree for the sample and the estimates
    sample = warmup_sample(w, WARMUP_FRACTION, seed=seed, tree=tree)
    est = effective_output_lengths(w, sample, true[sample], tree=tree)
    guard = w.max_tokens
    if SPLIT_TAIL_SAMPLES:
        bound = tail_threshold(Workload(w.tokens, w.offsets, w.max_tokens, est), step_tokens=config.step_tokens)
        est, guard = tail_split_lengths(w, sample, true[sample], est, bound, tree)
    del tree
    p = plan(Workload(w.tokens, w.offsets, w.max_tokens, est, guard), model, hw, "blendserve",
             kv_capacity_bytes=kv_bytes, step_tokens=config.step_tokens, step_fill=config.step_fill, seed=seed)
    rest = p.order[~np.isin(p.order, sample)]
    return np.concatenate([sample, rest]), p.sharing_ratio


def run_workload(name: str, w: Workload, model: ModelProfile, hw: HardwareProfile, policies: list[str],
                 config: EngineConfig = EngineConfig(), *, seed: int = 0, plan_only: bool = False,
                 lengths: str = "estimate",
                 progress: Callable[[str, float], None] | None = None) -> WorkloadRun:
    """Plan and simulate w under each policy. `lengths`: what BlendServe plans with (see LENGTH_MODES).

    The planner paces to the simulated engine's step budget, step fill and KV pool.
    DFS runs in both directions of the prefix tree (ascending token ids and
    the reverse, itself a DFS with siblings reversed: the datasets' order
    flips) and keeps the faster, so BlendServe is compared with the better
    DFS, not with whichever dataset the sort happened to put first.
    """
    if lengths not in LENGTH_MODES:
        raise ValueError(f"lengths must be one of {LENGTH_MODES}")
    if plan_only:      # the simulator's trie (2.5x the planner's peak memory) is not needed: the planner's tree
        tree = PrefixTree.build(w)           # gives the same s_DFS (DFS reuse with an unbounded cache)
        s_dfs, trie = sharing_ratio(w, tree.order, tree), None
        del tree
    else:
        trie = build_prefix_trie(w)
        s_dfs = dfs_sharing_ratio(w, trie)
    out = WorkloadRun(name, w.n, density(w, s_dfs, model, hw), s_dfs, optimum(w, model, hw, s_dfs, config),
                      engine_bound(w, model, hw, s_dfs, config), ideal(w, model, hw, s_dfs),
                      overlap=config.overlap, step_tokens=config.step_tokens, step_fill=config.step_fill)
    kv_bytes = config.capacity(model, hw) * model.kv_bytes_per_token
    truth = Workload(w.tokens, w.offsets, w.max_tokens, output_lengths(w).astype(np.float64))
    for policy in policies:
        t0, c0 = time.perf_counter(), time.process_time()
        if policy == "blendserve" and lengths == "estimate":
            order, plan_sharing = _blendserve_estimated(w, model, hw, kv_bytes, config, seed)
        else:
            p = plan(truth, model, hw, policy, kv_capacity_bytes=kv_bytes, step_tokens=config.step_tokens,
                     step_fill=config.step_fill, seed=seed)
            order, plan_sharing = p.order, p.sharing_ratio
        plan_s, plan_cpu = time.perf_counter() - t0, time.process_time() - c0
        result, direction = None, ""
        if not plan_only:
            cb = (lambda f, _p=policy: progress(_p, f)) if progress else None
            result = simulate(w, order, model, hw, config, trie=trie, progress=cb)
            if policy == "dfs":
                direction = "ascending"
                other = simulate(w, order[::-1].copy(), model, hw, config, trie=trie, progress=cb)
                if other.seconds < result.seconds:
                    result, direction = other, "descending"
        out.runs[policy] = PolicyRun(policy, plan_s, plan_sharing, result, direction, plan_cpu)
    return out
