"""What a simulation returns: totals and a per-step timeline (blendserve/simulator/engine.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Timeline:
    """Per step (or per jump of identical decode steps): start, duration, compute and memory seconds,
    KV tokens in use at its end and requests decoding in it."""
    start: np.ndarray
    duration: np.ndarray
    comp: np.ndarray
    mem: np.ndarray
    kv_tokens: np.ndarray
    decoding: np.ndarray

    def utilisation(self, bins: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Bin centres (s) and the time-weighted compute and memory utilisation in each bin.

        Utilisation is the fraction of peak FLOP/s (resp. bandwidth) in use, so
        it cannot exceed the efficiency factor.
        """
        end = float(self.start[-1] + self.duration[-1]) if len(self.start) else 0.0
        edges = np.linspace(0.0, end, bins + 1)
        mid = self.start + self.duration / 2.0
        idx = np.clip(np.searchsorted(edges, mid, side="right") - 1, 0, bins - 1)
        dur = np.bincount(idx, self.duration, bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            cu = np.bincount(idx, self.comp, bins) / dur
            mu = np.bincount(idx, self.mem, bins) / dur
        return (edges[:-1] + edges[1:]) / 2.0, np.nan_to_num(cu), np.nan_to_num(mu)


@dataclass
class SimResult:
    seconds: float
    prompt_tokens: int
    output_tokens: int            # generated, counted once each
    computed_prompt_tokens: int   # prompt tokens prefilled at each request's first admission (cache misses)
    recomputed_tokens: int        # prompt and generated tokens prefilled again after preemptions
    finished: int
    preemptions: int
    steps: int
    peak_kv_tokens: int
    kv_capacity_tokens: int
    comp_seconds: float           # sum over steps of pure compute time
    mem_seconds: float            # sum over steps of pure memory time
    timeline: Timeline = field(repr=False)

    @property
    def tokens_per_s(self) -> float:
        """(input + output tokens) / s, the paper's throughput."""
        return (self.prompt_tokens + self.output_tokens) / self.seconds if self.seconds > 0 else 0.0

    @property
    def sharing_ratio(self) -> float:
        """Fraction of prompt tokens the prefix cache saved at first admission.

        Re-prefills after a preemption are a cost of memory pressure, not of
        the cache, and are counted in recomputed_tokens instead.
        """
        return 1.0 - self.computed_prompt_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
