"""What the vLLM and SGLang embedding engines share: a /v1/embeddings request split into its inputs, each
one engine request, and the request's result once every input is embedded."""
from __future__ import annotations

import numpy as np

from blendserve.protocol.embeddings import split
from blendserve.worker.engines.base import GenRequest
from blendserve.worker.engines.embed.engine import EmbedResult


class Pending:
    """A request whose inputs are in the engine: their vectors as they finish."""

    def __init__(self, request: GenRequest) -> None:
        self.request = request
        self.inputs: list[np.ndarray] = split(request.input_ids)
        self.left = len(self.inputs)
        self.tokens = sum(len(x) for x in self.inputs)
        self.vectors: list[np.ndarray | None] = [None] * len(self.inputs)

    def done(self, i: int, vector: np.ndarray) -> EmbedResult | None:
        """Input `i` is embedded; the request's result once it was the last."""
        self.vectors[i] = vector
        self.left -= 1
        return self.result() if self.left == 0 else None

    def result(self) -> EmbedResult:
        return EmbedResult(key=self.request.key, output_ids=[], text="", finish_reason="stop",
                           prompt_tokens=self.tokens, cached_tokens=0, vectors=np.stack(self.vectors))

    def refused(self, message: str) -> EmbedResult:
        """The request's own error: the engine refused one of its inputs."""
        return EmbedResult(key=self.request.key, output_ids=[], text="", finish_reason="stop",
                           prompt_tokens=self.tokens, cached_tokens=0, error=message)
