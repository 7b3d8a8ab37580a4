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
from scheduler.simulator.engine import output_lengths


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
