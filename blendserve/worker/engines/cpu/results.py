"""A finished request's result on the CPU engine: its text, its logprobs less the end-of-sequence token, and,
for n > 1, every choice's sequence gathered under choice 0's result."""
from __future__ import annotations

from typing import Any

from blendserve.worker.engines.base import GenResult
from blendserve.worker.engines.cpu.scheduler import Sequence
from blendserve.worker.engines.logprobs import TokenNames


class Results:
    """Results of one engine: an n > 1 request's finished choices wait here, by key, for the others."""

    def __init__(self, tokenizer: Any, eos: set[int], names: TokenNames, fingerprint: str) -> None:
        self.tokenizer, self.eos, self.names, self.fingerprint = tokenizer, eos, names, fingerprint
        self.choices: dict[int, list[Sequence | None]] = {}

    def expect(self, key: int, n: int) -> None:
        """The request has n choices: its result comes once all have finished."""
        self.choices[key] = [None] * n

    def of(self, seq: Sequence) -> GenResult | None:
        """The request's result once all its choices finished (None while some still run)."""
        if seq.forks:                     # ended before its first token (too long): so do the other choices
            forks, seq.forks = seq.forks, None
            for fork in forks:
                fork.finish_reason, fork.cached_tokens = seq.finish_reason, 0
                self.of(fork)
        group = self.choices.get(seq.key)
        if group is None:
            return self.one(seq)
        group[seq.choice] = seq
        if any(s is None for s in group):
            return None
        del self.choices[seq.key]
        first, *rest = (self.one(s) for s in group)
        first.choices = rest
        first.__post_init__()             # completion tokens of every choice
        return first

    def one(self, seq: Sequence) -> GenResult:
        text = seq.text
        if text is None:
            text = self.tokenizer.decode(seq.output, skip_special_tokens=True)
        logprobs = None
        if (noted := seq.state[1].logprobs) is not None:
            if noted and noted[-1][0] in self.eos and seq.finish_reason == "stop":
                noted = noted[:-1]        # the end-of-sequence token is not part of the text
            logprobs = [self.names.entry(t, lp, top) for t, lp, top in noted]
        return GenResult(
            key=seq.key,
            output_ids=seq.output,
            text=text,
            finish_reason=seq.finish_reason,
            prompt_tokens=seq.prompt_len,
            cached_tokens=seq.cached_tokens or 0,
            logprobs=logprobs,
            fingerprint=self.fingerprint,
        )
