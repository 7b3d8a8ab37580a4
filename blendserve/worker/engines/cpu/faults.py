"""What fails one request alone on the CPU engine (docs/design.md §12.1).

A prompt's token ids are checked against the embedding table before the request is a sequence: an id
past it would make the embedding lookup of the whole step raise, for every request in it. Inside a step,
the work that belongs to one sequence (its sampling state, its grammar mask, its caller's token callback)
is caught per sequence: the sequence ends, its request gets an error result, and the step's other
sequences keep what the step computed for them.
"""
from __future__ import annotations

import torch

from blendserve.worker.engines.cpu.sampler import SamplingState, sample
from blendserve.worker.engines.driver import Refused


def check_ids(key: int, ids: list[int], vocab: int) -> None:
    """Raise Refused, naming the first id outside 0..vocab-1 and its position, or for an empty prompt."""
    if not ids:
        raise Refused(f"Request {key} has an empty prompt.")
    if min(ids) >= 0 and max(ids) < vocab:
        return
    at = next(i for i, t in enumerate(ids) if not 0 <= t < vocab)
    raise Refused(f"Token id {ids[at]} at prompt position {at} is outside the model's vocabulary of {vocab} "
                  f"tokens (ids 0 to {vocab - 1}).")


def sample_each(logits: torch.Tensor, states: list[SamplingState], masks: object) -> list[int | Exception]:
    """`sample` over a step's rows, where a row whose own state raises gets its exception in place of a
    token and every other row its token.

    Logit bias and penalties are applied here, row by row, before `sample` (which then skips them), so
    a row is never adjusted twice; where `sample` itself raises, each row is sampled again on its own,
    its logprobs noted before the failure dropped. A seeded row that drew before the failure draws
    again from a generator that moved: its token may differ from a step without the failure (greedy
    rows never do)."""
    out: list[int | Exception | None] = [None] * len(states)
    adjusted = [s for s in states if s.adjusts]
    for row, state in enumerate(states):
        if state.adjusts:
            try:
                state.adjust(logits[row])
            except Exception as e:
                out[row] = e
    for state in adjusted:
        state.adjusts = False
    try:
        rows = [row for row, got in enumerate(out) if got is None]
        whole = len(rows) == len(states)
        _sample_rows(logits if whole else logits[rows], [states[r] for r in rows], masks if whole else None,
                     rows, out)
    finally:
        for state in adjusted:
            state.adjusts = True
    return out      # type: ignore[return-value]


def _sample_rows(logits: torch.Tensor, states: list[SamplingState], masks: object, rows: list[int],
                 out: list[int | Exception | None]) -> None:
    """Tokens of `rows` (logits' rows in order) into `out`; one row at a time where the batch raises."""
    if not rows:
        return
    noted = [len(s.logprobs) if s.logprobs is not None else 0 for s in states]
    try:
        for row, token in zip(rows, sample(logits, states, masks)):      # type: ignore[arg-type]
            out[row] = token
        return
    except Exception:
        pass
    for i, (row, state) in enumerate(zip(rows, states)):
        if state.logprobs is not None:
            del state.logprobs[noted[i]:]
        try:
            out[row] = sample(logits[i:i + 1], [state])[0]
        except Exception as e:
            out[row] = e
