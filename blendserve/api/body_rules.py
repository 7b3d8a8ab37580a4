"""The API's reading of an interactive body by the rules a worker holds it to (blendserve/protocol), before
it is forwarded: a body they refuse is the caller's 400 here, in the API's process, and never reaches a worker.

Why here as well as in the worker: the worker parses a body in the process its engine runs in, so a tenant's
megabyte schemas that the rules refuse would hold the interpreter lock the engine's loop needs, and every
tenant's steps would wait (docs/design.md §12.1). The API reads what the rules need of a model without its
tokenizer (context length and vocabulary from config.json, the deployment's grammar and answer limits); the
worker still checks in full (the chat template's tool-call format, the prompt's tokens against the context)
what passes here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from blendserve.api.errors import APIError
from blendserve.core.embedstore import is_embedding_checkpoint
from blendserve.core.grammar_settings import GrammarSettings
from blendserve.core.limit_settings import LimitSettings
from blendserve.core.modelstore import context_length, vocab_size
from blendserve.protocol.fields import BodyError, ModelInfo
from blendserve.protocol.grammar_limits import with_grammar
from blendserve.protocol.requests import parse

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")   # a generation model's


def _tokenizer_free(*_: Any, **__: Any) -> Any:
    raise RuntimeError("the API's body rules run without the model's tokenizer")


class BodyRules:
    """Each served generation model's door (a ModelInfo without a tokenizer), read once its checkpoint is there."""

    def __init__(self, checkpoints: dict[str, Path], grammar: GrammarSettings, limits: LimitSettings) -> None:
        self.checkpoints, self.grammar, self.limits = checkpoints, grammar, limits
        self.doors: dict[str, ModelInfo | None] = {}

    def check(self, path: str, body: dict, model: str) -> None:
        """APIError 400 naming what the rules refuse; nothing for a body they pass (or a model not read yet)."""
        info = self._door(model) if path in ENDPOINTS else None
        if info is None:
            return
        try:
            parse(path, body, info, interactive=True)
        except BodyError as e:
            raise APIError(400, e.message, param=e.param, code=e.code) from None

    def _door(self, model: str) -> ModelInfo | None:
        if model in self.doors:
            return self.doors[model]
        checkpoint = self.checkpoints.get(model)
        try:
            if checkpoint is None or is_embedding_checkpoint(checkpoint):
                door = None                    # an embedding model's bodies are its worker's to read
            else:
                # tool_calls: True lets tool_choice "auto" through; the worker knows the chat template.
                door = with_grammar(ModelInfo(name=model, context_length=context_length(checkpoint),
                                              render_chat=_tokenizer_free, encode=_tokenizer_free,
                                              encode_prompt=_tokenizer_free, tool_calls=True,
                                              vocab_size=vocab_size(checkpoint)), self.grammar, self.limits)
        except (OSError, ValueError, KeyError):
            return None                        # not there yet (being converted): read again next time
        self.doors[model] = door
        return door
