"""A planning round, recorded: one `planning_rounds` row per model and round, for /metrics and the dashboard.

The API cannot see inside the scheduler process, so the scheduler writes each
round down (in the round's own write transaction): when it ran, how long it
took, how many requests it (re)planned, and the policy's estimate of the work
(time, compute and memory seconds, prefill and decode tokens). The estimate
also gives a batch its ETA before enough of it has run to extrapolate from.

Each row also carries the model's running totals (rounds, requests, seconds,
cumulative duration buckets), so /metrics reads one row per model however long
the history, and a model's rows older than KEEP_S are deleted when it plans
again, without a counter going back.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from blendserve.core.models import ROUND_BUCKETS_S, PlanningRound

KEEP_S = 86400.0       # rounds kept for the dashboard; the newest of each model carries the running totals


@dataclass
class RoundEstimate:
    """The policy's estimate of the work it planned (sums over the round's priority classes)."""
    seconds: float = 0.0
    compute_s: float = 0.0
    memory_s: float = 0.0
    prefill_tokens: float = 0.0       # prompt tokens the plan expects to compute (not served by the prefix cache)
    decode_tokens: float = 0.0

    def add(self, other: RoundEstimate) -> None:
        for f in ("seconds", "compute_s", "memory_s", "prefill_tokens", "decode_tokens"):
            setattr(self, f, getattr(self, f) + getattr(other, f))

    @property
    def balance(self) -> float:
        """Compute seconds per memory second: above 1 compute-bound, below 1 memory-bound."""
        return self.compute_s / self.memory_s if self.memory_s > 0 else float("inf")


def estimate_seconds(compute_s: float, memory_s: float, steps: float, weight_bytes: float, bandwidth: float,
                     ranks: int, efficiency: float = 0.94) -> float:
    """The simulator's `sequential` step model summed over a round, without stepping through it.

    A step of vLLM / SGLang takes max(GEMMs, weight reads) + KV reads, over
    the simulator's kernel efficiency (blendserve/simulator/engine.py); summed
    over `steps` steps that is at least max(compute, steps x weight reads) +
    KV reads. Ranks run their equal pieces at once.
    """
    return (max(compute_s, steps * weight_bytes / bandwidth) + memory_s) / efficiency / max(ranks, 1)


def fewest_steps(tokens: float, step_tokens: int, longest_output: float, ranks: int) -> float:
    """Steps a rank needs at least: its share of the tokens at a full step each, or its longest decode."""
    return max(tokens / max(step_tokens, 1) / max(ranks, 1), float(longest_output), 1.0)


def take_estimate(policy: object, model: str) -> RoundEstimate | None:
    """The estimate the policy built while planning `model` (and forgets it); None where it makes none."""
    take = getattr(policy, "take_estimate", None)
    return take(model) if take is not None else None


def record(s: Session, model: str, started_at: float, duration_s: float, requests: int,
           est: RoundEstimate | None) -> None:
    """Write the round with the model's running totals (one indexed read of its previous round), and drop the
    model's rounds older than KEEP_S: the newest row carries every total, so no counter goes back."""
    prev = s.scalar(select(PlanningRound).where(PlanningRound.model == model)
                    .order_by(PlanningRound.id.desc()).limit(1))
    buckets = list(prev.buckets_total) if prev is not None else [0] * len(ROUND_BUCKETS_S)
    s.add(PlanningRound(
        model=model, started_at=started_at, duration_s=duration_s, requests=requests,
        est_seconds=est and est.seconds, est_compute_s=est and est.compute_s, est_memory_s=est and est.memory_s,
        est_prefill_tokens=est and est.prefill_tokens, est_decode_tokens=est and est.decode_tokens,
        rounds_total=(prev.rounds_total if prev else 0) + 1,
        requests_total=(prev.requests_total if prev else 0) + requests,
        seconds_total=(prev.seconds_total if prev else 0.0) + duration_s,
        buckets_total=[n + (duration_s <= b) for n, b in zip(buckets, ROUND_BUCKETS_S)]))
    s.execute(delete(PlanningRound).where(PlanningRound.model == model,       # the new row stays: it is newer
                                          PlanningRound.started_at < started_at - KEEP_S))


def describe(est: RoundEstimate | None) -> str:
    """The log line's tail: estimated time and compute/memory balance."""
    if est is None:
        return "no estimate"
    bal = "inf" if not np.isfinite(est.balance) else f"{est.balance:.2f}"
    return (f"estimated {est.seconds:.3g}s, compute {est.compute_s:.3g}s / memory {est.memory_s:.3g}s "
            f"(balance {bal}), {est.prefill_tokens:.0f} prefill + {est.decode_tokens:.0f} decode tokens")
