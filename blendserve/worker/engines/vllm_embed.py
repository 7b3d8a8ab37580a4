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

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from blendserve.worker.engines.base import EngineStats, GenRequest
from blendserve.worker.engines.driver import CoreDefaults, Feed, drive
from blendserve.worker.engines.embed.engine import EmbedResult
from blendserve.worker.engines.pooled import Pending
from blendserve.worker.engines.vllm import URGENT, VllmBase, VllmOptions


class _EmbedCore(CoreDefaults):
    """One stream on vLLM's pooling runner: every input a vLLM request ("key:i"), at most the running cap plus
    the queue of them in vLLM."""

    def __init__(self, engine: VllmEmbeddingEngine) -> None:
        self.engine = engine
        self.pending: dict[str, Pending] = {}
        self.cap = int(engine._engine.vllm_config.scheduler_config.max_num_seqs) + engine.options.queued

    def room(self) -> bool:
        return self.engine._in_flight < self.cap

    def add(self, request: GenRequest, urgent: bool) -> None:
        from vllm import PoolingParams

        p = self.pending[str(request.key)] = Pending(request)
        for i, ids in enumerate(p.inputs):
            self.engine._engine.add_request(f"{request.key}:{i}", {"prompt_token_ids": ids.tolist()},
                                            PoolingParams(task="embed"), priority=URGENT if urgent else 0)
        self.engine._in_flight += len(p.inputs)

    def abort(self, keys: list[int]) -> None:
        for key in keys:
            if (p := self.pending.pop(str(key), None)) is not None:
                self._abort(p)

    def busy(self) -> bool:
        return bool(self.pending)

    def step(self, feed: Feed) -> Iterator[EmbedResult]:
        for out in self.engine._engine.step():
            if not out.finished:
                continue
            key, i = out.request_id.rsplit(":", 1)
            if (p := self.pending.get(key)) is None:
                continue
            self.engine._in_flight -= 1
            if (result := p.done(int(i), out.outputs.data.float().numpy())) is not None:
                del self.pending[key]
                yield result

    def close(self) -> None:
        for p in self.pending.values():
            self._abort(p)
        self.pending.clear()

    def _abort(self, p: Pending) -> None:
        ids = [f"{p.request.key}:{i}" for i, v in enumerate(p.vectors) if v is None]
        self.engine._in_flight -= len(ids)
        if ids and self.engine._engine is not None:
            self.engine._engine.abort_request(ids)


class VllmEmbeddingEngine(VllmBase):
    def __init__(self, model_path: Path, model_name: str, options: VllmOptions) -> None:
        import torch

        self.model_name = model_name
        self.options = options
        args = {k: v for k, v in self.options.engine_args(Path(model_path), model_name).items()
                if k not in ("logprobs_mode", "speculative_config", "enable_prefix_caching",
                             "structured_outputs_config")}
        args.update(runner="pooling", dtype=self.options.dtype or ("auto" if torch.cuda.is_available() else "float32"))
        self._start(args)
        self._budget = int(self._engine.vllm_config.scheduler_config.max_num_batched_tokens)
        self._in_flight = 0

    def kv_capacity_tokens(self) -> int:
        """No KV cache outlives a step: what one step carries is the engine's capacity."""
        return self._budget

    def step_token_budget(self) -> int:
        return self._budget

    def stats(self) -> EngineStats:
        return EngineStats(running_sequences=self._in_flight, kv_used_tokens=0)

    def generate(self, requests: Iterable[GenRequest], cancelled: Callable[[int], bool] | None = None,
                 urgent: Callable[[], list[GenRequest]] | None = None,
                 cancel_epoch: Callable[[], int] | None = None) -> Iterator[EmbedResult]:
        yield from drive(_EmbedCore(self), requests, cancelled, urgent, cancel_epoch)
