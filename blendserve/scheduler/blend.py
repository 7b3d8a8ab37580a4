"""The BlendServe policy in the service: the pure planner fed from the job table.

Per model and round:
1. Output lengths: every recently completed request of the model is an
   observation, so estimates come from the prefix subtree a request shares
   with finished ones, across jobs (a new job behind a known system prompt
   starts warm). Fresh requests in subtrees with no observation are cold.
   Two estimates per request, each where it is right (see `_lengths`): the
   blend plans on effective lengths, the round's token counts use means.
2. Warm-up: about 1% of the cold requests, spread over their subtrees, run
   first; when they finish, a new round re-plans the rest with their lengths.
3. Deadlines: requests whose batch expires within the urgency horizon run
   next, blended among themselves.
4. The rest: the planner's blend, cut into one piece per live worker
   (data-parallel rank) of equal estimated time.

Pacing: the blend is paced to the live workers' step budget (the smallest
`workers.step_tokens`: decodes + prefill chunk per step) and KV capacity.
Where every live worker's engine cannot mix prefill and decode in one step
(step_tokens null), a blend cannot overlap them: the policy says so once in
the log and plans for prefix reuse first (the DFS order, no warm-up).
The round's estimate (its ETA) is priced on the workers' own device
(`workers.hardware`: a vLLM worker on a CPU is a CPU, not an H100).

DFS is the same policy with the order swapped for the prefix-sorted one
(what SGLang's `lpm` or a user sorting the file by prompt gets): same
deadline rule, same per-rank cut. It needs no warm-up, since output
lengths do not change a sorted order; observed lengths still weigh the
per-rank cut.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from blendserve.core.models import Request
from blendserve.planner import (
    HARDWARE,
    HardwareProfile,
    ModelProfile,
    PrefixTree,
    Workload,
    effective_output_lengths,
    estimate_output_lengths,
    plan,
    tail_split_lengths,
    tail_threshold,
    warmup_sample,
)
from blendserve.planner.perf import comp_time, mem_time
from blendserve.planner.plan import STEP_TOKENS
from blendserve.scheduler.planning import Piece, Round
from blendserve.scheduler.rounds import RoundEstimate, estimate_seconds, fewest_steps

log = logging.getLogger("blendserve.scheduler")

PRIOR_OUTPUT_TOKENS = 256


def _workload(prompts: list[bytes], max_tokens: np.ndarray) -> Workload:
    arrays = [np.frombuffer(b, dtype="<i4") for b in prompts]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([len(a) for a in arrays], out=offsets[1:])
    tokens = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int32)
    return Workload(tokens, offsets, max_tokens)


@dataclass(frozen=True)
class Lengths:
    """Output-length estimates of a round's requests: two, because a subtree's lengths are used two ways."""
    mean: np.ndarray        # subtree mean: for token counts and compute, linear in d
    effective: np.ndarray   # KV reads of the subtree's expected reads (p d + d^2/2): for the plan and memory
    bound: np.ndarray       # the output bound the plan guards: max_tokens, or `effective` where the cap is loose


def _lengths(r: Round, ranks: int, step: int) -> tuple[Lengths, np.ndarray]:
    """Both estimates for every request of the round from the model's history, and the cold fresh requests.

    The plan runs on effective lengths (blendserve/planner/estimate.py): its
    densities, memory split and pacing are about KV reads, which are
    quadratic in d, and a subtree mean hides a heavy tail (mostly short chats
    with one 16K-token generation among them look compute-dense at the mean,
    and the blend would give that band none of the KV pool it will take).
    Token counts and compute are linear in d, so for them (the round's
    estimate: decode tokens, compute seconds, the ETA's steps) the mean is
    the expected value and the effective length would overstate them.
    Cold: fresh requests no sample of their own subtree covers (the mean
    estimate with a NaN prior finds them; the warm-up samples them first).
    Where there is no history at all both are min(max_tokens, 256).
    The effective lengths keep the long-bound requests' observations apart
    (plan.tail_threshold, judged on a first estimate of this round), as the
    simulator does: a few 16K-token outputs must not lift the short-bound
    requests' lengths, or the blend's clock for them depends on what the
    history happened to catch. A cap that the history shows to be loose
    (estimate.loose_caps: chats capped at 4096 that decode a few hundred) is
    no bound: those requests are planned at their estimates.
    """
    hist_prompts, hist_out, hist_cap = r.history or ([], np.zeros(0), np.zeros(0))
    h = len(hist_prompts)
    every = _workload(list(hist_prompts) + list(r.prompts), np.concatenate([hist_cap, r.max_tokens]).astype(np.int64))
    tree = PrefixTree.build(every)
    seen = np.arange(h)
    mean = estimate_output_lengths(every, seen, hist_out, prior=np.nan, tree=tree)[h:]
    cold = np.flatnonzero(np.isnan(mean) & r.fresh & (r.max_tokens > 0))   # prefill-only (embeddings): no output
    prior = float(hist_out.mean()) if h else PRIOR_OUTPUT_TOKENS
    mean = np.where(np.isnan(mean), np.minimum(prior, r.max_tokens), mean)
    first = effective_output_lengths(every, seen, hist_out, tree=tree)
    start = every.offsets[h]                       # the round's own requests, as a view of `every`
    now = Workload(every.tokens[start:], every.offsets[h:] - start, r.max_tokens, first[h:])
    bound = tail_threshold(now, ranks=ranks, step_tokens=step)
    effective, guard = tail_split_lengths(every, seen, hist_out, first, bound, tree)
    return Lengths(mean, effective[h:], guard[h:]), cold


class BlendServe:
    needs_prompts = True
    order = "blendserve"        # blendserve.planner.plan's policy; only a blend warms up (lengths change it)

    def __init__(self, model_paths: dict[str, Path], *, hardware: str = "", warmup_fraction: float = 0.01,
                 urgent_horizon_s: float = 900.0,
                 step_budgets: Callable[[list[str]], dict[str, int | None]] | None = None) -> None:
        """step_budgets: worker ids -> their step_tokens (the worker rows); None: every engine mixes at
        the planner's default step (STEP_TOKENS)."""
        self.profiles = {name: ModelProfile.from_config(path, name) for name, path in model_paths.items()}
        self.hardware, self.warmup_fraction, self.urgent_horizon_s = hardware, warmup_fraction, urgent_horizon_s
        self.step_budgets = step_budgets
        self.warmups: dict[str, np.ndarray] = {}     # model -> request ids of its running warm-up sample
        self.ranks: dict[str, int] = {}
        self.told_unmixed: set[str] = set()          # models whose "cannot mix" was logged
        self.estimates: dict[str, RoundEstimate] = {}  # model -> this round's estimate so far (scheduler/rounds.py)

    def take_estimate(self, model: str) -> RoundEstimate | None:
        return self.estimates.pop(model, None)

    def wants_round(self, session: Session, model: str, live_workers: int) -> bool:
        if live_workers and live_workers != self.ranks.get(model, live_workers):
            return True
        warm = self.warmups.get(model)
        if warm is not None and len(warm):
            unfinished = session.scalar(select(Request.id).where(
                Request.id.in_(warm.tolist()), Request.status.in_(("pending", "planned"))).limit(1))
            if unfinished is None:
                del self.warmups[model]
                return True
        return False

    def step_tokens(self, r: Round) -> int | None:
        """The live workers' smallest step budget; None when none of them can mix prefill and decode."""
        if self.step_budgets is None or not r.workers:
            return STEP_TOKENS
        known = self.step_budgets([w[0] for w in r.workers])
        budgets = [known[w[0]] for w in r.workers if w[0] in known]
        if budgets and all(b is None for b in budgets):
            return None
        return min((b for b in budgets if b), default=STEP_TOKENS)

    def hardware_profile(self, workers: list[tuple[str, str, int, str | None]]) -> HardwareProfile:
        """What the round is priced on: the configured profile (BLENDSERVE_HARDWARE), else the live workers'
        own (the slowest where they differ: the round waits for it), else by engine, for workers that do not say
        (the CPU engine's profile for CPU engines, an H100 for the rest)."""
        if self.hardware:
            return HARDWARE[self.hardware]
        own = [HARDWARE[w[3]] for w in workers if w[3] in HARDWARE]
        if own:
            return min(own, key=lambda h: (h.flops, h.bandwidth))
        return HARDWARE["cpu" if {w[1] for w in workers} <= {"cpu"} else "h100-sxm"]

    def pieces(self, r: Round) -> list[Piece]:
        n = len(r.ids)
        step = self.step_tokens(r)
        order = self.order
        if step is None and order == "blendserve":
            order = "dfs"
            if r.model not in self.told_unmixed:
                self.told_unmixed.add(r.model)
                log.warning("blendserve %s: the workers' engine cannot mix prefill and decode in one step, so a "
                            "blend cannot overlap them; planning for prefix reuse first (DFS order)", r.model)
        model = self.profiles[r.model]
        hw = self.hardware_profile(r.workers)
        ranks = max(1, len(r.workers))
        kv = min((w[2] for w in r.workers), default=0) * model.kv_bytes_per_token or None
        self.ranks[r.model] = ranks

        est, cold = _lengths(r, ranks, step or STEP_TOKENS)

        pieces: list[Piece] = []
        taken = np.zeros(n, dtype=bool)
        if len(cold) and order == "blendserve":
            sample = cold[warmup_sample(_workload([r.prompts[i] for i in cold], r.max_tokens[cold]),
                                        fraction=self.warmup_fraction)]
            if len(sample):
                pieces.append(Piece(sample))
                taken[sample] = True
                self.warmups[r.model] = r.ids[sample]
        urgent = np.flatnonzero(~taken & (r.expires_at - time.time() < self.urgent_horizon_s))
        rest = np.flatnonzero(~taken)
        step = step or STEP_TOKENS
        if len(urgent):
            pieces += self._blend(r, urgent, est, model, hw, kv, 1, order, step)
            rest = np.setdiff1d(rest, urgent)
        if len(rest):
            pieces += self._blend(r, rest, est, model, hw, kv, ranks, order, step)
        log.info("%s %s: %d request(s), %d history, %d warm-up, %d urgent, %d rank(s), %d-token steps", order,
                 r.model, n, len(r.history[0]) if r.history else 0, int(taken.sum()), len(urgent), ranks, step)
        return pieces

    def _blend(self, r: Round, idx: np.ndarray, est: Lengths, model: ModelProfile, hw, kv: float | None,
               ranks: int, order: str, step: int) -> list[Piece]:
        wl = _workload([r.prompts[i] for i in idx], r.max_tokens[idx])
        guarded = Workload(wl.tokens, wl.offsets, wl.max_tokens, est.effective[idx], est.bound[idx])
        p = plan(guarded, model, hw, order, kv_capacity_bytes=kv, ranks=ranks, step_tokens=step)
        wl.output_len = est.effective[idx]
        self._estimate(r.model, wl, est.mean[idx], p.sharing_ratio, model, hw, ranks, step)
        if ranks == 1:
            return [Piece(idx[p.order])]
        return [Piece(idx[o], rank=k) for k, o in enumerate(p.rank_orders)]


    def _estimate(self, name: str, wl: Workload, mean: np.ndarray, sharing: float, model: ModelProfile, hw,
                  ranks: int, step: int) -> None:
        """Add this piece of the round to its estimate: tokens the order computes, their compute and KV-read
        seconds (Comp and Mem of docs/design.md §3.1, the prefix cache taking `sharing` of the prompts), and the
        time of the `sequential` step model (blendserve/scheduler/rounds.py). Decode tokens, compute and the longest
        decode come from the mean lengths (linear in d: a sum of means is the expected sum); KV reads from
        the effective lengths wl.output_len (quadratic in d: they keep each subtree's expected reads)."""
        p, d = wl.prompt_lens().astype(np.float64), np.minimum(mean, wl.max_tokens)
        prefill, decode = float(p.sum()) * (1.0 - sharing), float(d.sum())
        compute = float(comp_time(prefill, decode, model, hw))
        memory = float(mem_time(p, np.minimum(wl.output_len, wl.max_tokens), model, hw).sum())
        steps = fewest_steps(prefill + decode, step, float(d.max(initial=0.0)), ranks)
        self.estimates.setdefault(name, RoundEstimate()).add(RoundEstimate(
            estimate_seconds(compute, memory, steps * ranks, model.weight_bytes(), hw.bandwidth, ranks),
            compute, memory, prefill, decode))


class DFS(BlendServe):
    """Prefix-sorted order per model across jobs, under BlendServe's deadline rule and per-rank cut: the baseline
    a plan must beat besides file order."""

    order = "dfs"
