"""The embedding engine: all-MiniLM-L6-v2 (any sentence-transformers BERT checkpoint) on the CPU.

What sentence-transformers' `encode` computes, with transformers' BertModel:
the encoder's last hidden states, mean-pooled over each input's real tokens
(or the [CLS] state where the checkpoint pools so), then L2-normalized where
its module list ends with Normalize; float32 throughout.

Embedding is prefill only: no KV cache outlives a step and nothing is decoded.
A step takes requests from the stream until their tokens reach the step budget
(a large one, STEP_TOKENS: there is no decode to keep short), sorts all their
inputs by length and runs them in sub-batches of at most SUB_BATCH_TOKENS padded
tokens, so inputs of like length share a sub-batch and padding stays small
(sentence-transformers sorts its whole input list by length to the same end).
Interactive requests are polled between sub-batches and run at once, as a
sub-batch of their own, so one waits for at most one sub-batch of batch work.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blendserve.core.embedstore import normalizes, pooling
from blendserve.protocol.embeddings import split
from blendserve.worker.engines.base import EngineStats, GenRequest, GenResult, device_profile
from blendserve.worker.engines.driver import CoreDefaults, Feed, drive
from blendserve.worker.engines.threads import DEFAULT_THREADS, one_thread

# Tokens of requests one step takes from the stream: the window sorted by length. Larger windows pad less;
# the step's results wait for the whole window.
STEP_TOKENS = 16384
# Padded tokens one forward pass carries: big enough for the matmuls to run at full speed on a CPU, small
# enough that an interactive request waits briefly for the sub-batch in flight.
SUB_BATCH_TOKENS = 4096


@dataclass
class EmbedResult(GenResult):
    """A request's vectors, one row per input, in input order (float32, normalized where the model is)."""
    vectors: Any = None


class EmbeddingEngine:
    def __init__(self, model_path: Path, model_name: str, threads: int | None = None,
                 step_tokens: int = STEP_TOKENS, sub_batch_tokens: int = SUB_BATCH_TOKENS) -> None:
        from transformers import BertModel

        self.model_name = model_name
        self.threads = threads or DEFAULT_THREADS
        self.step_tokens, self.sub_batch_tokens = step_tokens, sub_batch_tokens
        path = Path(model_path)
        with one_thread():
            self.model = BertModel.from_pretrained(str(path), add_pooling_layer=False,
                                                   torch_dtype=torch.float32).eval()
        self.pad_id = int(self.model.config.pad_token_id or 0)
        self.cls_pooling = pooling(path) == "cls"
        self.normalize = normalizes(path)
        self.running = 0
        self.tokens_done = 0            # tokens embedded since start (benchmarks read it)

    def kv_capacity_tokens(self) -> int:
        """No KV cache outlives a step: what one step holds is the engine's capacity."""
        return self.step_tokens

    def step_token_budget(self) -> int:
        return self.step_tokens

    def hardware(self) -> str | None:
        return device_profile()

    def stats(self) -> EngineStats:
        return EngineStats(running_sequences=self.running, kv_used_tokens=0)

    def close(self) -> None:
        pass

    # -- the forward pass --------------------------------------------------------------------------

    @torch.inference_mode()
    def embed(self, inputs: list[np.ndarray]) -> np.ndarray:
        """Vectors of token-id arrays run together as one padded sub-batch."""
        longest = max(len(x) for x in inputs)
        ids = torch.full((len(inputs), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(inputs), longest), dtype=torch.long)
        for i, x in enumerate(inputs):
            ids[i, :len(x)] = torch.from_numpy(np.asarray(x, dtype=np.int64))
            mask[i, :len(x)] = 1
        hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        if self.cls_pooling:
            v = hidden[:, 0]
        else:
            m = mask.unsqueeze(-1).to(hidden.dtype)
            v = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        if self.normalize:
            v = torch.nn.functional.normalize(v, p=2, dim=-1)
        return v.float().numpy()

    def _sub_batches(self, lengths: np.ndarray) -> Iterator[np.ndarray]:
        """Indices of inputs, shortest first, cut so that each sub-batch's padded size fits the budget."""
        order = np.argsort(lengths, kind="stable")
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end + 1 - start) * lengths[order[end]] <= self.sub_batch_tokens:
                end += 1
            yield order[start:end]
            start = end

    def _run(self, requests: list[GenRequest],
             urgent: Callable[[], list[GenRequest]] | None = None) -> Iterator[EmbedResult]:
        """Every input of the requests, in sub-batches, then their results; interactive requests polled between
        sub-batches run at once and their results come out first, as soon as they are ready."""
        segments = [split(r.input_ids) for r in requests]
        flat = [s for segs in segments for s in segs]
        lengths = np.array([len(s) for s in flat], dtype=np.int64)
        out = np.zeros((len(flat), self.model.config.hidden_size), dtype=np.float32)
        for idx in self._sub_batches(lengths):
            if urgent is not None and (now := urgent()):
                yield from self._run(now)
            out[idx] = self.embed([flat[i] for i in idx])
        self.tokens_done += int(lengths.sum())
        at = 0
        for r, segs in zip(requests, segments):
            n = len(segs)
            yield EmbedResult(key=r.key, output_ids=[], text="", finish_reason="stop",
                              prompt_tokens=int(lengths[at:at + n].sum()), cached_tokens=0, vectors=out[at:at + n])
            at += n

    # -- the stream --------------------------------------------------------------------------------

    def generate(self, requests: Iterable[GenRequest], cancelled: Callable[[int], bool] | None = None,
                 urgent: Callable[[], list[GenRequest]] | None = None,
                 cancel_epoch: Callable[[], int] | None = None) -> Iterator[EmbedResult]:
        """Steps of up to step_tokens tokens each, requests admitted in stream order; interactive ones first
        and between sub-batches. A request cancelled before its step runs is dropped without a result."""
        torch.set_num_threads(self.threads)
        yield from drive(_EmbedCore(self), requests, cancelled, urgent, cancel_epoch)


class _EmbedCore(CoreDefaults):
    """One stream: the next step's requests gathered until their tokens reach the step budget."""

    def __init__(self, engine: EmbeddingEngine) -> None:
        self.engine = engine
        self.step_requests: list[GenRequest] = []
        self.tokens = 0

    def room(self) -> bool:
        return self.tokens < self.engine.step_tokens

    def add(self, request: GenRequest, urgent: bool) -> None:
        self.step_requests.append(request)
        self.tokens += len(request.input_ids)

    def abort(self, keys: list[int]) -> None:
        gone = set(keys)
        self.step_requests = [r for r in self.step_requests if r.key not in gone]
        self.tokens = sum(len(r.input_ids) for r in self.step_requests)

    def busy(self) -> bool:
        return bool(self.step_requests)

    def step(self, feed: Feed) -> Iterator[EmbedResult]:
        step, self.step_requests, self.tokens = self.step_requests, [], 0
        self.engine.running = len(step)
        try:
            yield from self.engine._run(step, feed.urgent if feed.interactive else None)
        finally:
            self.engine.running = 0

    def close(self) -> None:
        self.step_requests = []
