"""The planner's input: the pending requests of one model, as flat numpy arrays.

Prompts are stored concatenated (``tokens``) with CSR-style ``offsets`` rather
than as a list of lists, because a planning round holds hundreds of thousands
of requests and hundreds of millions of token ids: one int32 array is ~4 bytes
a token, a Python list of ints ~36.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class Workload:
    tokens: np.ndarray                      # int32, all prompts' token ids concatenated
    offsets: np.ndarray                     # int64, len n+1; prompt i is tokens[offsets[i]:offsets[i+1]]
    max_tokens: np.ndarray                  # int32 [n]
    output_len: np.ndarray | None = None    # float64 [n]: known or estimated output lengths (None = unknown)
    bound: np.ndarray | None = None         # int32 [n]: the output bound the plan guards (None = max_tokens;
    # estimate.tail_split_lengths lowers it to the estimate where the warm-up shows a cap to be loose)

    def __post_init__(self) -> None:
        self.tokens = np.ascontiguousarray(self.tokens, dtype=np.int32)
        self.offsets = np.ascontiguousarray(self.offsets, dtype=np.int64)
        self.max_tokens = np.ascontiguousarray(self.max_tokens, dtype=np.int32)
        if self.output_len is not None:
            self.output_len = np.ascontiguousarray(self.output_len, dtype=np.float64)
        if self.bound is not None:
            self.bound = np.ascontiguousarray(self.bound, dtype=np.int32)
        n = len(self.offsets) - 1
        if n < 0 or self.offsets[0] != 0 or self.offsets[-1] != len(self.tokens):
            raise ValueError("offsets must start at 0 and end at len(tokens)")
        if np.any(np.diff(self.offsets) < 0):
            raise ValueError("offsets must be non-decreasing")
        if len(self.max_tokens) != n:
            raise ValueError("max_tokens must have one entry per request")
        if self.output_len is not None and len(self.output_len) != n:
            raise ValueError("output_len must have one entry per request")
        if self.bound is not None and len(self.bound) != n:
            raise ValueError("bound must have one entry per request")

    @property
    def n(self) -> int:
        return len(self.offsets) - 1

    def prompt_lens(self) -> np.ndarray:
        """Prompt length of every request, int64 [n]."""
        return np.diff(self.offsets)

    @classmethod
    def from_lists(
        cls,
        prompts: Sequence[Sequence[int]],
        max_tokens: Sequence[int] | np.ndarray | int,
        output_len: Sequence[float] | np.ndarray | None = None,
    ) -> Workload:
        """Build from one token-id list per request (tests, small callers)."""
        lens = np.fromiter((len(p) for p in prompts), dtype=np.int64, count=len(prompts))
        offsets = np.zeros(len(prompts) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        tokens = np.fromiter((t for p in prompts for t in p), dtype=np.int32, count=int(offsets[-1]))
        mt = np.broadcast_to(np.asarray(max_tokens, dtype=np.int32), (len(prompts),)).copy()
        ol = None if output_len is None else np.asarray(output_len, dtype=np.float64)
        return cls(tokens, offsets, mt, ol)
