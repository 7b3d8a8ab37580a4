"""What the simulated engine tracks: each admitted request, and what one step carries besides its decodes."""
from __future__ import annotations

from dataclasses import dataclass, field


class Running:
    """One admitted request. Decode state is linear in the global decode clock."""
    __slots__ = ("req", "node", "prefill_left", "generated0", "start_clock", "seq")

    def __init__(self, req: int, node: int, prefill_left: int, generated0: int, seq: int) -> None:
        self.req = req
        self.node = node
        self.prefill_left = prefill_left
        self.generated0 = generated0      # tokens generated before this admission (recomputed in prefill)
        self.start_clock = -1             # decode clock at its first decode step; -1 while prefilling
        self.seq = seq                    # admission sequence number (preempt the largest first)


@dataclass
class StepBatch:
    """What one step carries besides its decodes: prefill chunks, their extra seconds, and why it stopped."""
    budget: int
    chunk_tokens: int = 0
    attn: float = 0.0           # prefill attention seconds, for profiles that count it
    chunk_o: float = 0.0        # per-chunk fixed seconds
    blocked: bool = False       # the queue head could not be admitted
    done: list[Running] = field(default_factory=list)   # prefills that complete in this step
