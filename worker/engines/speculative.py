"""Speculative decoding, switched per deployment: ``BLENDSERVE_SPECULATIVE=ngram|off``.

One setting for every engine: the CPU engine drafts by prompt lookup itself
(``cpu/speculative.py``); vLLM and SGLang get their own n-gram speculation
through their engine config (``vllm()``, ``sglang()``), so no engine needs a
second model. ``BLENDSERVE_SPEC_TOKENS`` is the draft length (vLLM's
num_speculative_tokens, SGLang's speculative_num_draft_tokens);
``BLENDSERVE_SPEC_NGRAM_MIN``/``_MAX`` the n-gram sizes matched (vLLM's
prompt_lookup_min/max). Pure Python: importing it needs neither vLLM nor SGLang.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_TOKENS = 8     # draft tokens a step at most
DEFAULT_MIN_N = 2      # a single matching token too often continues differently (chat)
DEFAULT_MAX_N = 3
# Drafts only in steps of at most this many sequences (CPU engine). A CPU step costs a fixed part
# (reading the weights) plus about its tokens: with few sequences the fixed part dominates and draft
# tokens ride nearly free; with many, every draft token costs what a decode token does, and a draft
# the model rejects is pure loss (BENCHMARKS.md, speculative decoding).
DEFAULT_MAX_RUNNING = 4


@dataclass(frozen=True)
class SpecConfig:
    """``BLENDSERVE_SPECULATIVE`` = ``ngram`` | ``off``; ``BLENDSERVE_SPEC_TOKENS`` = draft tokens a step;
    ``BLENDSERVE_SPEC_MAX_RUNNING`` = the most sequences a CPU step may carry and still draft."""

    method: str = "off"
    tokens: int = DEFAULT_TOKENS
    min_n: int = DEFAULT_MIN_N
    max_n: int = DEFAULT_MAX_N
    max_running: int = DEFAULT_MAX_RUNNING

    @classmethod
    def from_env(cls, default: str = "off") -> SpecConfig:
        env = os.environ.get
        method = (env("BLENDSERVE_SPECULATIVE") or default).strip().lower()
        if method in ("0", "false", "no", "none", ""):
            method = "off"
        if method not in ("off", "ngram"):
            raise ValueError(f"BLENDSERVE_SPECULATIVE={method!r}: use 'ngram' or 'off'")
        return cls(method, int(env("BLENDSERVE_SPEC_TOKENS") or DEFAULT_TOKENS),
                   int(env("BLENDSERVE_SPEC_NGRAM_MIN") or DEFAULT_MIN_N),
                   int(env("BLENDSERVE_SPEC_NGRAM_MAX") or DEFAULT_MAX_N),
                   int(env("BLENDSERVE_SPEC_MAX_RUNNING") or DEFAULT_MAX_RUNNING))

    @property
    def on(self) -> bool:
        return self.method != "off" and self.tokens > 0

    def vllm(self) -> dict | None:
        """vLLM's ``speculative_config`` (its n-gram proposer: prompt lookup, as here), or None when off."""
        if not self.on:
            return None
        return {"method": "ngram", "num_speculative_tokens": self.tokens,
                "prompt_lookup_min": self.min_n, "prompt_lookup_max": self.max_n}

    def sglang(self) -> dict:
        """``sglang.Engine`` arguments: its NGRAM algorithm (CUDA only, SGLang says) with as many draft tokens."""
        if not self.on:
            return {}
        return {"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": self.tokens}
