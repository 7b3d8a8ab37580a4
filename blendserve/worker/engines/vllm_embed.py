"""vLLM's pooling runner as the embedding engine (`--engine vllm` on a sentence-transformers checkpoint).

The same requests as the CPU embedding engine (blendserve/worker/engines/embed): one per
/v1/embeddings line, its inputs joined (core/embeddings.join). Each input is
one vLLM pooling request (task "embed"), whose pooling and normalization vLLM
reads from the checkpoint's sentence-transformers config, as
sentence-transformers' `encode` applies them. Inputs reach vLLM in plan order,
at most max_num_seqs + queued in flight (blendserve/worker/engines/vllm.py's admission);
interactive requests go in at vLLM's higher priority. A request's result comes
once all its inputs are embedded. float32 on a CPU, as sentence-transformers
computes there; vLLM's default dtype on a GPU.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from blendserve.protocol.embeddings import split
from blendserve.worker.engines.base import EngineStats, GenRequest, device_profile
from blendserve.worker.engines.embed.engine import EmbedResult
from blendserve.worker.engines.vllm import URGENT, VllmOptions


class _Pending:
    """A request whose inputs are in vLLM: their vectors as they finish."""

    def __init__(self, request: GenRequest, inputs: list[np.ndarray]) -> None:
        self.request, self.left = request, len(inputs)
        self.tokens = sum(len(x) for x in inputs)
        self.vectors: list[np.ndarray | None] = [None] * len(inputs)


class VllmEmbeddingEngine:
    def __init__(self, model_path: Path, model_name: str, options: VllmOptions | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from vllm import EngineArgs, LLMEngine

        self.model_name = model_name
        self.options = options or VllmOptions.from_settings()
        args = {k: v for k, v in self.options.engine_args(Path(model_path), model_name).items()
                if k not in ("logprobs_mode", "speculative_config", "enable_prefix_caching",
                             "structured_outputs_config")}
        args.update(runner="pooling", dtype=self.options.dtype or ("auto" if torch.cuda.is_available() else "float32"))
        self._engine = LLMEngine.from_engine_args(EngineArgs(**args))
        self._budget = int(self._engine.vllm_config.scheduler_config.max_num_batched_tokens)
        self._in_flight = 0

    def kv_capacity_tokens(self) -> int:
        """No KV cache outlives a step: what one step carries is the engine's capacity."""
        return self._budget

    def step_token_budget(self) -> int:
        return self._budget

    def hardware(self) -> str | None:
        return device_profile()

    def stats(self) -> EngineStats:
        return EngineStats(running_sequences=self._in_flight, kv_used_tokens=0)

    def close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.engine_core.shutdown()

    def _add(self, request: GenRequest, pending: dict[str, _Pending], priority: int = 0) -> int:
        """Every input of the request into vLLM (request ids "key:i"); returns how many."""
        from vllm import PoolingParams

        inputs = split(request.input_ids)
        pending[str(request.key)] = _Pending(request, inputs)
        for i, ids in enumerate(inputs):
            self._engine.add_request(f"{request.key}:{i}", {"prompt_token_ids": ids.tolist()},
                                     PoolingParams(task="embed"), priority=priority)
        return len(inputs)

    def generate(self, requests: Iterable[GenRequest], cancelled: Callable[[int], bool] | None = None,
                 urgent: Callable[[], list[GenRequest]] | None = None,
                 cancel_epoch: Callable[[], int] | None = None) -> Iterator[EmbedResult]:
        stream = iter(requests)
        pending: dict[str, _Pending] = {}
        cap = int(self._engine.vllm_config.scheduler_config.max_num_seqs) + self.options.queued
        exhausted, seen_epoch = False, None
        try:
            while True:
                for request in urgent() if urgent is not None else ():
                    self._in_flight += self._add(request, pending, URGENT)
                while not exhausted and self._in_flight < cap:
                    request = next(stream, None)
                    if request is None:
                        exhausted = True
                    else:
                        self._in_flight += self._add(request, pending)
                epoch = cancel_epoch() if cancel_epoch is not None else None
                if cancelled is not None and (epoch is None or epoch != seen_epoch):
                    seen_epoch = epoch
                    for key in [k for k, p in pending.items() if cancelled(p.request.key)]:
                        self._abort(pending.pop(key))
                if not pending:
                    return
                for out in self._engine.step():
                    if not out.finished:
                        continue
                    key, i = out.request_id.rsplit(":", 1)
                    p = pending.get(key)
                    if p is None:
                        continue
                    p.vectors[int(i)] = out.outputs.data.float().numpy()
                    p.left -= 1
                    self._in_flight -= 1
                    if p.left == 0:
                        del pending[key]
                        yield EmbedResult(key=p.request.key, output_ids=[], text="", finish_reason="stop",
                                          prompt_tokens=p.tokens, cached_tokens=0, vectors=np.stack(p.vectors))
        finally:
            for p in pending.values():
                self._abort(p)

    def _abort(self, p: _Pending) -> None:
        ids = [f"{p.request.key}:{i}" for i, v in enumerate(p.vectors) if v is None]
        self._in_flight -= len(ids)
        if ids and self._engine is not None:
            self._engine.abort_request(ids)
