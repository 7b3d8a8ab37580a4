"""The practical optimum every simulated order is measured against (DESIGN.md section 3).

T_o = max((1 - s_DFS) T_comp, T_mem), with T_comp and T_mem the sums of the
performance model's Comp and Mem over the workload and s_DFS the sharing of a
DFS order with an unbounded cache. It ignores the weights read every step,
finite memory and imperfect overlap, so no order can beat it in the simulator,
which prices the same tokens the same way (see engine.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduler.planner.perf import HardwareProfile, ModelProfile, comp_time, mem_time
from scheduler.planner.workload import Workload
from scheduler.simulator.engine import EngineConfig, output_lengths


@dataclass(frozen=True)
class Optimum:
    t_comp: float
    t_mem: float
    sharing: float
    tokens: int

    @property
    def seconds(self) -> float:
        return max((1.0 - self.sharing) * self.t_comp, self.t_mem)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def optimum(w: Workload, model: ModelProfile, hw: HardwareProfile, sharing: float) -> Optimum:
    """The optimum of w given its DFS sharing ratio (prefix.dfs_sharing_ratio)."""
    p = w.prompt_lens()
    d = output_lengths(w)
    return Optimum(float(np.sum(comp_time(p, d, model, hw))), float(np.sum(mem_time(p, d, model, hw))),
                   sharing, int(p.sum() + d.sum()))


def engine_bound(w: Workload, model: ModelProfile, hw: HardwareProfile, sharing: float,
                 config: EngineConfig = EngineConfig()) -> Optimum:
    """A tighter bound for the simulated engine: the optimum plus what every order must pay there.

    Every step reads the weights once and at most the KV pool, computes at
    most step_tokens tokens, and a request decodes one token a step. So there
    are at least K = max(KV token reads / pool, compute tokens / step_tokens,
    longest output) steps, memory time is at least T_mem + K x weights / B,
    and the engine's efficiency divides both. The gap between this and the
    optimum is engine physics; the gap between a policy and this is ordering.
    Returned as an Optimum whose t_mem carries the weight reads and whose
    times are divided by the efficiency.
    """
    base = optimum(w, model, hw, sharing)
    comp = (1.0 - sharing) * base.t_comp
    kv_reads = base.t_mem * hw.bandwidth / model.kv_bytes_per_token
    steps = max(kv_reads / config.capacity(model, hw), comp / (2.0 * model.params / hw.flops) / config.step_tokens,
                float(output_lengths(w).max(initial=0)))
    mem = base.t_mem + steps * model.weight_bytes() / hw.bandwidth
    return Optimum(comp / config.efficiency, mem / config.efficiency, 0.0, base.tokens)
