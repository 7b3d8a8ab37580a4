"""Where the requests that decode longest go: the tail placed on the engine's clock, and the known-short
requests set apart to finish each rank (docs/design.md §3)."""
from __future__ import annotations

import numpy as np

TAIL_SHARE = 0.1       # a request whose output bound is at least this share of the compute steps is the tail
SHORT_SHARE = 1 / 8    # short_finish: a cap at most this share of the longest other cap is known short


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
