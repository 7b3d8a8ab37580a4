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
    """`sample` over a step's rows; where it raises, each row again on its own, so a row whose own state
    raises gets its exception in place of a token and every other row its token.

    The rows a state adjusts in place (logit bias, penalties) are kept to be restored before the retry,
    and logprobs noted before the failure are dropped, so a retried row is sampled from its own logits
    once. A seeded row that drew before the failure draws again from a generator that moved: its token
    may differ from a step without the failure (greedy rows never do)."""
    kept = {row: logits[row].clone() for row, s in enumerate(states) if s.adjusts}
    noted = [len(s.logprobs) if s.logprobs is not None else 0 for s in states]
    try:
        return list(sample(logits, states, masks))      # type: ignore[arg-type]
    except Exception:
        pass
    out: list[int | Exception] = []
    for row, state in enumerate(states):
        if row in kept:
            logits[row] = kept[row]
        if state.logprobs is not None:
            del state.logprobs[noted[row]:]
        try:
            out.append(sample(logits[row:row + 1], [state])[0])
        except Exception as e:
            out.append(e)
    return out
