"""What the CPU engine's scheduler hands out: a sequence (a request's tokens and state), the chunk of it a step
computes, and the step (blendserve/worker/engines/cpu/scheduler.py says how they are chosen)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Sequence:
    key: int
    tokens: list[int]                 # prompt, then every sampled token
    prompt_len: int
    state: Any = None                 # the engine's per-sequence sampling state
    computed: int = 0                 # tokens whose K/V are in the pool
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)   # chained hashes of the full computed blocks
    cached_tokens: int | None = None  # prompt tokens the prefix cache served at first admission
    prompt_hashes: list[int] | None = None   # chained hashes of the prompt's full blocks, once admitted
    finish_reason: str | None = None
    text: str | None = None           # set when a stop string cut the output
    urgent: bool = False              # an interactive request: ahead of batch work
    tenant: str = ""                  # an interactive request's tenant (GenRequest.tenant): turns among tenants
    lookup: Any = None                # the drafter's index of this sequence (speculative decoding)
    choice: int = 0                   # which of its request's n choices this is
    # Choices 1..n-1 of an n > 1 request, held by choice 0 until its prompt is computed: they then take its
    # prompt's cached blocks and compute only their last partial block (one prefill for all n).
    forks: list[Sequence] | None = None

    @property
    def output(self) -> list[int]:
        return self.tokens[self.prompt_len:]


@dataclass
class ScheduledChunk:
    seq: Sequence
    start: int
    n: int                            # tokens run, the draft's included
    draft: list[int] = field(default_factory=list)   # proposed tokens after the sequence's last one

    @property
    def samples(self) -> bool:
        """The chunk reaches the sequence's last token, whose logits give the next one."""
        return self.start + self.n - len(self.draft) == len(self.seq.tokens)


@dataclass
class Step:
    chunks: list[ScheduledChunk]
    preempted: int = 0
    finished: list[Sequence] = field(default_factory=list)   # could not fit the pool even alone

    @property
    def prefill_tokens(self) -> int:
        return sum(c.n for c in self.chunks if c.n > 1 and not c.draft)

    @property
    def decode_tokens(self) -> int:
        return sum(1 for c in self.chunks if c.n == 1 or c.draft)

    @property
    def draft_tokens(self) -> int:
        return sum(len(c.draft) for c in self.chunks)
