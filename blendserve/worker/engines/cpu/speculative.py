"""Speculative decoding by prompt lookup: drafts from n-grams already in the sequence, no second model.

Decisions:

* The draft is *prompt lookup*: the last ``max_n`` .. ``min_n`` tokens of the
  sequence (prompt and output so far) are looked up among their earlier
  occurrences, most recent first, longest n first, and the up to ``k`` tokens
  that followed are the draft. It costs a dict lookup per step (each sequence
  keeps an index of its n-grams, updated as tokens arrive) and pays where the
  output repeats the input: rewrites, extraction, code edits, quoting.
* Verification is one forward step: the sequence's chunk is its last token
  plus the draft, and every row of it gets logits. Row j picks the token
  exactly as plain decoding would (``sampler.sample``: logit bias, penalties
  with the counts of the tokens accepted so far, greedy or a draw from the
  sequence's own generator); the run is accepted while the picked token equals
  the draft's, and the first one that differs (or the bonus token after a
  fully accepted draft) is appended too. EOS, stop strings, max_tokens and the
  context end are checked token by token as in plain decoding, so a finishing
  token cuts the accepted run.
* All requests speculate, sampled ones too: a draft is one token, not a
  distribution, so the standard rejection rule (accept with probability
  min(1, p/q) = p(token), else draw from p without it) is exactly "draw from p
  and keep going while the draw equals the draft". Each output token still
  costs one draw from the generator, in order, so a seeded request gives the
  same tokens with speculation on or off.
* K/V of rejected positions is not undone: it lies past ``computed`` and is
  overwritten when those positions are computed for real; blocks allocated
  only for rejected positions go back to the pool, and a block is registered
  in the prefix cache only once all its tokens are committed (``Scheduler.advance``).
* Drafts never preempt and never take budget from a running sequence's
  prefill: the scheduler adds them after every running sequence's own chunk,
  from what is left of the step's token budget and of the free blocks, before
  admitting new sequences.
"""
from __future__ import annotations

from dataclasses import dataclass

from blendserve.worker.engines.speculative import SpecConfig

__all__ = ["PromptLookup", "SpecConfig", "SpecStats"]


class PromptLookup:
    """One sequence's n-grams (n in min_n..max_n), each mapped to the position after its latest occurrence.

    An n-gram ending at position e is indexed only once token e exists, so
    the lookup of the sequence's own suffix never finds itself.

    The draft length adapts per sequence (``feedback``): after a rejection the
    next draft is at most one token longer than what was accepted, and each
    fully accepted draft doubles it again, up to ``k``. A draft rejected at
    its first token pauses drafting for 1, 2, 4 .. ``MAX_PAUSE`` steps (the
    pause doubling while that goes on, reset by any accepted token). So a
    sequence whose guesses keep failing (open-ended text) seldom pays for a
    draft, and one that copies its prompt is back to full drafts within a few steps.
    """

    MAX_PAUSE = 16

    def __init__(self, min_n: int, max_n: int, k: int) -> None:
        self.min_n, self.max_n = max(1, min_n), max(1, max_n)
        self.k = self.limit = k
        self.index: dict[tuple[int, ...], int] = {}
        self.indexed = 1          # n-grams ending before this position are in the index
        self.pause = 0            # steps left without a draft
        self.next_pause = 1       # the pause after the next draft rejected at its first token

    def feedback(self, drafted: int, accepted: int) -> None:
        self.limit = min(self.k, 2 * drafted) if accepted == drafted else accepted + 1
        if accepted:
            self.next_pause = 1
        else:
            self.pause, self.next_pause = self.next_pause, min(2 * self.next_pause, self.MAX_PAUSE)

    def update(self, tokens: list[int]) -> None:
        index = self.index
        for end in range(self.indexed, len(tokens)):
            for n in range(self.min_n, min(self.max_n, end) + 1):
                index[tuple(tokens[end - n:end])] = end
        self.indexed = max(self.indexed, len(tokens))

    def propose(self, tokens: list[int], k: int) -> list[int]:
        k = min(k, self.limit)
        if self.pause > 0:
            self.pause -= 1
            return []
        if k <= 0:
            return []
        self.update(tokens)
        for n in range(min(self.max_n, len(tokens)), self.min_n - 1, -1):
            end = self.index.get(tuple(tokens[-n:]))
            if end is not None:
                return tokens[end:end + k]
        return []


@dataclass
class SpecStats:
    """Counted over the engine's life: what the drafts offered and what verification kept."""

    steps: int = 0        # sequence-steps that carried a draft
    drafted: int = 0      # draft tokens verified
    accepted: int = 0     # draft tokens that became output

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0
