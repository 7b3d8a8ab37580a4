"""The BlendServe policy in the service: the pure planner fed from the job table.

Per model and round:
1. Output lengths: every recently completed request of the model is an
   observation, so estimates come from the prefix subtree a request shares
   with finished ones, across jobs (a new job behind a known system prompt
   starts warm). Fresh requests in subtrees with no observation are cold.
2. Warm-up: about 1% of the cold requests, spread over their subtrees, run
   first; when they finish, a new round re-plans the rest with their lengths.
3. Deadlines: requests whose batch expires within the urgency horizon run
   next, blended among themselves.
4. The rest: the planner's blend, cut into one piece per live worker
   (data-parallel rank) of equal estimated time.

DFS is the same policy with the order swapped for the prefix-sorted one
(what SGLang's `lpm` or a user sorting the file by prompt gets): same
deadline rule, same per-rank cut. It needs no warm-up, since output
lengths do not change a sorted order; observed lengths still weigh the
per-rank cut.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.models import Request
from scheduler.planner import HARDWARE, ModelProfile, Workload, estimate_output_lengths, plan, warmup_sample
from scheduler.planning import Piece, Round

log = logging.getLogger("blendserve.scheduler")

PRIOR_OUTPUT_TOKENS = 256


def _workload(prompts: list[bytes], max_tokens: np.ndarray) -> Workload:
    arrays = [np.frombuffer(b, dtype="<i4") for b in prompts]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([len(a) for a in arrays], out=offsets[1:])
    tokens = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int32)
    return Workload(tokens, offsets, max_tokens)


class BlendServe:
    needs_prompts = True
    order = "blendserve"        # scheduler.planner.plan's policy for the non-urgent part
    warms_up = True             # run a sample of cold subtrees first to learn their output lengths

    def __init__(self, model_paths: dict[str, Path], *, hardware: str = "", warmup_fraction: float = 0.01,
                 urgent_horizon_s: float = 900.0) -> None:
        self.profiles = {name: ModelProfile.from_config(path, name) for name, path in model_paths.items()}
        self.hardware, self.warmup_fraction, self.urgent_horizon_s = hardware, warmup_fraction, urgent_horizon_s
        self.warmups: dict[str, np.ndarray] = {}     # model -> request ids of its running warm-up sample
        self.ranks: dict[str, int] = {}

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

    def pieces(self, r: Round) -> list[Piece]:
        n = len(r.ids)
        model = self.profiles[r.model]
        engines = {w[1] for w in r.workers}
        hw = HARDWARE[self.hardware or ("cpu" if engines <= {"cpu"} else "h100-sxm")]
        ranks = max(1, len(r.workers))
        kv = min((w[2] for w in r.workers), default=0) * model.kv_bytes_per_token or None
        self.ranks[r.model] = ranks

        hist_prompts, hist_out = r.history or ([], np.zeros(0))
        h = len(hist_prompts)
        mt = np.concatenate([hist_out.astype(np.int64), r.max_tokens])
        every = _workload(list(hist_prompts) + list(r.prompts), mt)
        est = estimate_output_lengths(every, np.arange(h), hist_out, prior=np.nan)[h:]
        cold = np.flatnonzero(np.isnan(est) & r.fresh)
        prior = float(hist_out.mean()) if h else PRIOR_OUTPUT_TOKENS
        est = np.where(np.isnan(est), np.minimum(prior, r.max_tokens), est)

        pieces: list[Piece] = []
        taken = np.zeros(n, dtype=bool)
        if len(cold) and self.warms_up:
            sample = cold[warmup_sample(_workload([r.prompts[i] for i in cold], r.max_tokens[cold]),
                                        fraction=self.warmup_fraction)]
            if len(sample):
                pieces.append(Piece(sample))
                taken[sample] = True
                self.warmups[r.model] = r.ids[sample]
        urgent = np.flatnonzero(~taken & (r.expires_at - time.time() < self.urgent_horizon_s))
        rest = np.flatnonzero(~taken)
        if len(urgent):
            pieces += self._blend(r, urgent, est, model, hw, kv, 1)
            rest = np.setdiff1d(rest, urgent)
        if len(rest):
            pieces += self._blend(r, rest, est, model, hw, kv, ranks)
        log.info(f"{self.order} %s: %d request(s), %d history, %d warm-up, %d urgent, %d rank(s)", r.model, n, h,
                 int(taken.sum()), len(urgent), ranks)
        return pieces

    def _blend(self, r: Round, idx: np.ndarray, est: np.ndarray, model: ModelProfile, hw, kv: float | None,
               ranks: int) -> list[Piece]:
        wl = _workload([r.prompts[i] for i in idx], r.max_tokens[idx])
        wl.output_len = est[idx]
        p = plan(wl, model, hw, self.order, kv_capacity_bytes=kv, ranks=ranks)
        if ranks == 1:
            return [Piece(idx[p.order])]
        return [Piece(idx[o], rank=k) for k, o in enumerate(p.rank_orders)]


class DFS(BlendServe):
    """Prefix-sorted order per model across jobs, under BlendServe's deadline rule and per-rank cut: the baseline
    a plan must beat besides file order."""

    order = "dfs"
    warms_up = False
