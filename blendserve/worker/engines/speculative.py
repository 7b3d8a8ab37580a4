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

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:     # the settings' pydantic only where settings are read: the CPU engine runs without it
    from blendserve.core.engine_settings import SpeculativeSettings


@dataclass(frozen=True)
class SpecConfig:
    """``BLENDSERVE_SPECULATIVE`` = ``ngram`` | ``off``; ``BLENDSERVE_SPEC_TOKENS`` = draft tokens a step;
    ``BLENDSERVE_SPEC_MAX_RUNNING`` = the most sequences a CPU step may carry and still draft."""

    method: str = "off"
    tokens: int = 8
    min_n: int = 2
    max_n: int = 3
    # Drafts only in steps of at most this many sequences (CPU engine). A CPU step costs a fixed part
    # (reading the weights) plus about its tokens: with few sequences the fixed part dominates and draft
    # tokens ride nearly free; with many, every draft token costs what a decode token does, and a draft
    # the model rejects is pure loss (BENCHMARKS.md, speculative decoding).
    max_running: int = 4

    @classmethod
    def from_settings(cls, settings: SpeculativeSettings, default: str = "off") -> SpecConfig:
        """The deployment's choice (BLENDSERVE_SPECULATIVE and BLENDSERVE_SPEC_*), ``default`` where unset."""
        s = settings
        return cls(s.method or default, s.tokens, s.ngram_min, s.ngram_max, s.max_running)

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
