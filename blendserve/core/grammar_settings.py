"""Bounded grammar work (BLENDSERVE_GRAMMAR_*): what one request's output schema may hold, checked where the
request is validated (protocol/grammar_limits.py), and the CPU engine's compile threads and time budget
(worker/engines/cpu/grammar.py). Defaults measured with SmolLM2's vocabulary: a schema within them compiles
in about a second or less."""
from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class GrammarSettings(BaseSettings):
    """One tenant's schema cannot freeze an engine: limits on its size and a budget on its compile."""
    model_config = SettingsConfigDict(env_prefix="BLENDSERVE_GRAMMAR_", extra="ignore", env_ignore_empty=True)

    schema_bytes: int = Field(100_000, gt=0)     # the output schema as compact JSON (all tools' under "required")
    enum_values: int = Field(1000, gt=0)         # enum values and consts in one schema (OpenAI's bound)
    any_of: int = Field(128, gt=0)               # branches of one anyOf
    properties: int = Field(1000, gt=0)          # object properties in one schema, all objects together
    tools: int = Field(128, gt=0)                # function tools in one request (OpenAI's bound)
    length: int = Field(500, gt=0)               # largest minLength, maxLength, minItems, maxItems
    pattern_size: int = Field(500, gt=0)         # a pattern with its repetitions written out ([\s\S]{0,600}: 600)
    compile_threads: int = Field(2, gt=0)        # CPU engine: grammars compiling at once
    compile_timeout_s: float = Field(10.0, gt=0)  # CPU engine: a compile past it fails its request alone
