"""Next-token choice: logit bias and penalties (OpenAI's semantics), the grammar's mask, then greedy or
temperature/top-p; and the log-probabilities of what was chosen.

OpenAI's definitions, applied to the logits before temperature:
``logit_bias`` adds its value to each listed token (-100 bans a token,
+100 all but forces it); ``presence_penalty`` subtracts its value once from
every token already in the output, ``frequency_penalty`` its value times the
token's count there. Only generated tokens count, not the prompt (as in
OpenAI's and vLLM's implementations).

Structured output (``grammar.py``) sets every token its grammar does not allow
next to -inf after the bias and penalties. Log-probabilities, when asked for,
are those of the distribution the token was drawn from: after bias,
penalties, the mask and temperature (temperature 1 for greedy requests,
whose distribution is a point mass), before top-p's cut.
"""
from __future__ import annotations

from collections import Counter

import torch

from blendserve.worker.engines.base import SamplingParams
from blendserve.worker.engines.cpu.grammar import GrammarState, StepMasks

FLOOR = -9999.0   # OpenAI's stand-in for a log-probability of -inf (JSON has no infinity)


class SamplingState:
    """What one sequence's sampling remembers: its random generator and its output's token counts."""

    def __init__(self, params: SamplingParams, grammar: GrammarState | None = None, choice: int = 0) -> None:
        """``choice``: which of the request's n choices this sequence is; with a seed, choice i draws from its
        own stream derived from (seed, i), so n choices are distinct and each reproducible."""
        self.params = params
        self.grammar = grammar
        self.generator = torch.Generator()
        if params.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed((params.seed + choice * 0x9E3779B97F4A7C15) % 2**64)
        # (token, its log-probability, the top_logprobs' (token, log-probability)) per sampled token
        self.logprobs: list[tuple[int, float, list[tuple[int, float]]]] | None = \
            None if params.logprobs is None else []
        self.counts: Counter[int] = Counter()
        self.adjusts = bool(params.logit_bias or params.presence_penalty or params.frequency_penalty)
        if params.logit_bias:
            self.bias_ids = torch.tensor([t for t, _ in params.logit_bias], dtype=torch.long)
            self.bias_values = torch.tensor([b for _, b in params.logit_bias], dtype=torch.float32)
            self.bias_placed = False

    @property
    def plain(self) -> bool:
        """Greedy with nothing to apply or record: the argmax of the raw logits is the token."""
        return self.params.temperature <= 0 and not self.adjusts and self.grammar is None and self.logprobs is None

    def record(self, token: int) -> None:
        if self.adjusts:
            self.counts[token] += 1
        if self.grammar is not None:
            self.grammar.accept(token)

    def adjust(self, logits: torch.Tensor) -> torch.Tensor:
        """Apply logit_bias and the penalties to one row of logits (in place)."""
        p = self.params
        if p.logit_bias:
            if not self.bias_placed:
                # Once per sequence: ids past the vocabulary dropped (validation's job; never crash a step), the
                # rest moved to the logits' device (a GPU engine's), so later steps copy nothing.
                keep = self.bias_ids < len(logits)
                self.bias_ids = self.bias_ids[keep].to(logits.device)
                self.bias_values = self.bias_values[keep].to(logits.device)
                self.bias_placed = True
            logits.index_add_(0, self.bias_ids, self.bias_values)
        if self.counts and (p.presence_penalty or p.frequency_penalty):
            ids = torch.tensor(list(self.counts), dtype=torch.long, device=logits.device)
            counts = torch.tensor(list(self.counts.values()), dtype=torch.float32, device=logits.device)
            logits.index_add_(0, ids, -(counts * p.frequency_penalty + p.presence_penalty))
        return logits


def sample(logits: torch.Tensor, states: list[SamplingState], masks: StepMasks | None = None) -> list[int]:
    """One token for each row of ``logits`` ([S, vocab], float32), each row by its own state; ``masks``: the
    grammar masks of the constrained rows, prepared while the forward pass ran (made here if not)."""
    for row, state in enumerate(states):
        if state.adjusts:
            state.adjust(logits[row])
    if masks is None and (grammars := [s.grammar for s in states if s.grammar is not None]):
        masks = grammars[0].grammars.prepare([s.grammar for s in states])
    if masks is not None:
        masks.apply(logits)
    greedy = logits.argmax(dim=-1).tolist()
    tokens = []
    for row, (state, best) in enumerate(zip(states, greedy)):
        p = state.params
        if p.temperature <= 0:
            tokens.append(best)
        else:
            tokens.append(draw(torch.softmax(logits[row] / p.temperature, dim=-1), p.top_p, state.generator))
        if state.logprobs is not None:
            note_logprobs(state, logits[row], tokens[-1])
    return tokens


def note_logprobs(state: SamplingState, logits: torch.Tensor, token: int) -> None:
    """Record the chosen token's log-probability and the likeliest ``params.logprobs`` tokens' (OpenAI lists
    the chosen one beside them, whether or not it is among them)."""
    temperature = state.params.temperature if state.params.temperature > 0 else 1.0
    logp = torch.log_softmax(logits / temperature, dim=-1)
    k = state.params.logprobs or 0
    top: list[tuple[int, float]] = []
    if k:
        values, ids = logp.topk(k)
        top = [(t, v) for t, v in zip(ids.tolist(), values.tolist()) if v > FLOOR]   # not the masked ones
    state.logprobs.append((token, max(float(logp[token]), FLOOR), top))


def draw(probs: torch.Tensor, top_p: float, generator: torch.Generator) -> int:
    """Draw a token from the smallest most-likely set whose mass reaches top_p.

    An inverse-CDF lookup with one uniform draw costs a tenth of
    torch.multinomial over a 49K vocabulary; and the nucleus is looked for among
    the 64 likeliest tokens first, sorting the whole vocabulary only when they
    fall short (rare: a model's next-token distribution is usually peaked).
    """
    if top_p >= 1.0:
        ids, cdf = None, probs.cumsum(0)
    else:
        for k in (min(64, len(probs)), len(probs)):
            top, ids = probs.topk(k)
            cdf = top.cumsum(0)
            if cdf[-1] >= top_p:
                break
        cdf = cdf[: int((cdf - top <= top_p).sum())]  # keep tokens whose preceding mass is within top_p
    u = torch.rand(1, generator=generator).to(cdf.device) * cdf[-1]     # the sequence's own stream, on the host
    i = min(int(torch.searchsorted(cdf, u, right=True)), len(cdf) - 1)
    return int(ids[i]) if ids is not None else i
