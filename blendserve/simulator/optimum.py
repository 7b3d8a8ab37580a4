"""The optima every simulated order is measured against (docs/design.md §3.2).

T_o = max((1 - s_DFS) T_comp, T_mem) (`ideal`), with T_comp and T_mem the
sums of the performance model's Comp and Mem over the workload and s_DFS the
sharing of a DFS order with an unbounded cache, ignores the weights read
every step. s_DFS is a fraction of the *prompt* tokens (prefix.dfs_sharing_ratio),
so it discounts only their share of T_comp: (1 - s) T_comp below means
T_comp - s T_prompt. Discounting the output tokens too would price
a cache hit on tokens no cache can hold: on trace 1 at 100K, where outputs
are 10% of the tokens, that puts the optimum 5.7% beyond any order. The
practical optimum T* = max((1 - s_DFS) T_comp, T_mem + K W / B)
(`optimum`, what every "fraction of optimum" figure is of) adds them: a step
holds at most the KV pool, so there are at least K = max(T_mem B / pool,
longest output) steps. Neither counts imperfect overlap or the engine's
efficiency, so no order can beat them in the simulator, which prices the
same tokens the same way (see engine.py). engine_bound is tighter still: it
adds what the simulated engine (its step budget, overlap mode, efficiency)
makes every order pay.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blendserve.planner.perf import HardwareProfile, ModelProfile, comp_time, mem_time
from blendserve.planner.workload import Workload
from blendserve.simulator.engine import EngineConfig, output_lengths


@dataclass(frozen=True)
class Optimum:
    t_comp: float                 # dense compute of every prompt and output token
    t_mem: float
    sharing: float                # fraction of the prompt tokens a DFS order need not compute
    tokens: int
    t_prompt: float = 0.0         # the prompt tokens' part of t_comp: the only part sharing saves
    sequential: bool = False      # compute and memory add instead of overlapping (engine_bound, sequential)

    @property
    def t_fresh(self) -> float:
        """Compute no order can avoid: t_comp less the prompt tokens the cache holds."""
        return self.t_comp - self.sharing * self.t_prompt

    @property
    def seconds(self) -> float:
        if self.sequential:
            return self.t_fresh + self.t_mem
        return max(self.t_fresh, self.t_mem)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def ideal(w: Workload, model: ModelProfile, hw: HardwareProfile, sharing: float) -> Optimum:
    """T_o of w given its DFS sharing ratio (prefix.dfs_sharing_ratio): no weight reads."""
    p = w.prompt_lens()
    d = output_lengths(w)
    return Optimum(float(np.sum(comp_time(p, d, model, hw))), float(np.sum(mem_time(p, d, model, hw))),
                   sharing, int(p.sum() + d.sum()), float(np.sum(comp_time(p, 0, model, hw))))


def optimum(w: Workload, model: ModelProfile, hw: HardwareProfile, sharing: float,
            config: EngineConfig = EngineConfig()) -> Optimum:
    """T* of w: T_o with the weights read once per step, K = max(T_mem B / pool, longest output) steps."""
    base = ideal(w, model, hw, sharing)
    kv_reads = base.t_mem * hw.bandwidth / model.kv_bytes_per_token
    steps = max(kv_reads / config.capacity(model, hw), float(output_lengths(w).max(initial=0)))
    return Optimum(base.t_comp, base.t_mem + steps * model.weight_bytes() / hw.bandwidth, sharing, base.tokens,
                   base.t_prompt)


def engine_bound(w: Workload, model: ModelProfile, hw: HardwareProfile, sharing: float,
                 config: EngineConfig = EngineConfig()) -> Optimum:
    """A tighter bound for the simulated engine: the optimum plus what every order must pay there.

    Every step reads the weights once and at most the KV pool, computes at
    most step_tokens tokens, and a request decodes one token a step. So there
    are at least K = max(KV token reads / pool, compute tokens / step_tokens,
    longest output) steps, memory time is at least T_mem + K x weights / B,
    and the engine's efficiency divides both. With sequential overlap the KV
    reads add to max(compute, weight reads) instead of hiding under compute,
    so the bound is T_mem + max(compute, K W / B). The gap between this and
    the optimum is engine physics; the gap between a policy and this is
    ordering. Returned as an Optimum whose t_mem carries the weight reads and
    whose times are divided by the efficiency.
    """
    base = ideal(w, model, hw, sharing)
    comp = base.t_fresh
    kv_reads = base.t_mem * hw.bandwidth / model.kv_bytes_per_token
    steps = max(kv_reads / config.capacity(model, hw), comp / (2.0 * model.params / hw.flops) / config.step_tokens,
                float(output_lengths(w).max(initial=0)))
    weights = steps * model.weight_bytes() / hw.bandwidth
    if config.overlap == "sequential":
        return Optimum(max(comp, weights) / config.efficiency, base.t_mem / config.efficiency, 0.0, base.tokens,
                       sequential=True)
    return Optimum(comp / config.efficiency, (base.t_mem + weights) / config.efficiency, 0.0, base.tokens)
