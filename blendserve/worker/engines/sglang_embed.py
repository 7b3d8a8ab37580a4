"""SGLang's embedding mode as the embedding engine (`--engine sglang` on a sentence-transformers checkpoint).

The same requests as the CPU embedding engine (blendserve/worker/engines/embed): one per
/v1/embeddings line, its inputs joined (core/embeddings.join). Each input is
one SGLang embedding request by token ids (`EmbeddingReqInput(input_ids=...)`
through its tokenizer manager: `Engine.async_encode` takes text only), run on
the one event loop of blendserve/worker/engines/sglang.py, whose docstring says why no
synchronous `sglang.Engine` method is ever called. Inputs reach SGLang in plan
order (its `fcfs` policy admits them so) while their tokens stay within
`in_flight_kv` KV pools; interactive requests go in at once, past that window,
ahead of everything not yet handed over. A request's result comes once all its
inputs are embedded; a cancelled request's inputs are aborted (cancelling the
task aborts the SGLang request) and it yields nothing.

Pooling. sentence-transformers mean-pools MiniLM's last hidden states and
L2-normalizes them (1_Pooling/config.json, modules.json). SGLang's BertModel
always pools the [CLS] state (its pooler is fixed in the model class; neither
a server argument nor its transformers backend, which knows CLS and LAST only,
offers mean pooling), which for MiniLM is another vector altogether. So the
scheduler is given a BertModel of ours (`EntryClass` below), SGLang's own with
its pooler built from the checkpoint: the engine reads the pooling with
blendserve.core.embedstore and passes it as `json_model_override_args` (`pooling_type`,
`normalize`: the config keys SGLang's transformers backend reads for the same
choice). SGLang loads it through SGLANG_EXTERNAL_MODEL_PACKAGE, its way of
adding model classes: the scheduler runs in a spawned process, which imports
that package's modules and takes each `EntryClass` (only this module has one),
and resolves "BertModel" to ours before its own. `EntryClass` is built on first
access, so importing this module needs no sglang.

Each SGLang prefill of an input is the whole input: the radix cache is off (a
prefix served from it would leave its tokens out of the pooled states, and
[CLS] pooling would read the wrong token) and chunked prefill is off (a chunk's
mean would be a part's). float32 on a CPU, as sentence-transformers computes
there; the checkpoint's dtype otherwise.
"""
from __future__ import annotations

import asyncio
import json
import queue
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from blendserve.core.embedstore import normalizes, pooling
from blendserve.core.engine_settings import SglangSettings
from blendserve.worker.engines.base import EngineStats, GenRequest
from blendserve.worker.engines.driver import CoreDefaults, Feed, drive
from blendserve.worker.engines.embed.engine import EmbedResult
from blendserve.worker.engines.pooled import Pending
from blendserve.worker.engines.sglang import CANCEL_SWEEP_S, URGENT_POLL_S, SGLangBase
from blendserve.worker.engines.sglang_args import engine_args
from blendserve.worker.engines.sglang_runtime import drain, resolved_args

MODEL_PACKAGE = "blendserve.worker.engines"     # SGLANG_EXTERNAL_MODEL_PACKAGE (set by the worker's entry point)


def embedding_args(model_path: Path, options: SglangSettings, *, tp: int = 1, cuda: bool = True) -> dict:
    """Keyword arguments for `sglang.Engine` in embedding mode, pooling as the checkpoint says."""
    args = engine_args(Path(model_path), options, tp=tp)
    args.pop("enable_mixed_chunk", None)        # nothing is decoded: there is no step to mix
    args.pop("enable_priority_scheduling", None)   # its requests carry no priority: plain FCFS
    overrides = {"pooling_type": pooling(model_path).upper(), "normalize": normalizes(model_path)}
    args.update(is_embedding=True, disable_radix_cache=True, chunked_prefill_size=-1,
                json_model_override_args=json.dumps(overrides))
    if not options.dtype and not cuda:
        args["dtype"] = "float32"
    return args


@lru_cache(maxsize=1)
def _entry_classes() -> list[type]:
    """SGLang's BertModel whose pooler is the checkpoint's (config `pooling_type`, `normalize`)."""
    from sglang.srt.layers.pooler import Pooler, PoolingType
    from sglang.srt.models import bert

    class BertModel(bert.BertModel):
        def __init__(self, *, config: Any, quant_config: Any = None, prefix: str = "") -> None:
            super().__init__(config=config, quant_config=quant_config, prefix=prefix)
            kind = str(getattr(config, "pooling_type", "CLS")).upper()
            self.pooler = Pooler(pooling_type=PoolingType[kind], normalize=bool(getattr(config, "normalize", True)))

    return [BertModel]


def __getattr__(name: str) -> Any:
    """`EntryClass`, what SGLang's model registry reads from each module of SGLANG_EXTERNAL_MODEL_PACKAGE."""
    if name == "EntryClass":
        return _entry_classes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Running(Pending):
    """A request whose inputs are in SGLang: their futures while they run."""

    def __init__(self, request: GenRequest) -> None:
        super().__init__(request)
        self.futures: list[Future | None] = [None] * len(self.inputs)


class _EmbedCore(CoreDefaults):
    """One stream on SGLang's embedding mode: every input a task on the engine's loop, their tokens within
    `in_flight_kv` KV pools (and at most twice the running cap of inputs) in flight."""

    sweep_s = CANCEL_SWEEP_S

    def __init__(self, engine: SGLangEmbeddingEngine, interactive: bool) -> None:
        self.engine = engine
        self.events: queue.Queue = queue.Queue()
        self.pending: dict[int, _Running] = {}
        self.budget = engine.options.in_flight_kv * engine._capacity
        self.wait_s = URGENT_POLL_S if interactive else CANCEL_SWEEP_S

    def fits(self, request: GenRequest) -> bool:
        e = self.engine
        return not self.pending or (e._tokens + len(request.input_ids) <= self.budget and
                                    (e._count_cap is None or e._inputs < e._count_cap))

    def add(self, request: GenRequest, urgent: bool) -> None:
        """Every input of the request into SGLang, each as its own request, in input order."""
        p = self.pending[request.key] = _Running(request)
        for i, ids in enumerate(p.inputs):
            fut = asyncio.run_coroutine_threadsafe(self.engine._embed(ids.tolist()), self.engine.loop)
            p.futures[i] = fut
            self.engine._inputs += 1
            self.engine._tokens += len(ids)
            fut.add_done_callback(lambda f, key=request.key, i=i: self.events.put((key, i, f)))

    def abort(self, keys: list[int]) -> None:
        for key in keys:
            if (p := self.pending.pop(key, None)) is not None:
                self._drop(p)

    def busy(self) -> bool:
        return bool(self.pending)

    def step(self, feed: Feed) -> Iterator[EmbedResult]:
        for key, i, fut in drain(self.events, self.wait_s):
            p = self.pending.get(key)
            if p is None or p.futures[i] is not fut:
                continue                        # cancelled or refused meanwhile
            self._finish(p, i)
            if fut.cancelled():
                continue
            if isinstance(exc := fut.exception(), ValueError):     # SGLang's own checks of one input
                self._drop(self.pending.pop(key))
                yield p.refused(f"SGLang refused input {i} of the request: {exc}")
                continue
            if exc is not None:
                raise exc
            if (result := p.done(i, fut.result())) is not None:
                del self.pending[key]
                yield result

    def close(self) -> None:
        for p in self.pending.values():
            self._drop(p)
        self.pending.clear()

    def _finish(self, p: _Running, i: int) -> None:
        p.futures[i] = None
        self.engine._inputs -= 1
        self.engine._tokens -= len(p.inputs[i])

    def _drop(self, p: _Running) -> None:
        """Cancel the request's inputs still in SGLang (SGLang aborts each)."""
        for i, fut in enumerate(p.futures):
            if fut is not None:
                self._finish(p, i)
                fut.cancel()


class SGLangEmbeddingEngine(SGLangBase):
    def __init__(self, model_path: Path, model_name: str, *, options: SglangSettings, tp: int = 1,
                 factory: Callable[..., Any] | None = None) -> None:
        """`options`: the deployment's SGLang settings; `factory`: what builds the SGLang engine from keyword
        arguments (sglang.Engine)."""
        import torch

        self.model_name = model_name
        self.options = options
        cuda = self.options.device in ("", "cuda") and torch.cuda.is_available()
        self._launch(factory, embedding_args(Path(model_path), self.options, tp=tp, cuda=cuda))
        resolved = resolved_args(self.engine.server_args)      # 0.5.23: server_args keeps the raw input
        self._step = min(int(resolved.get("max_prefill_tokens") or self._capacity), self._capacity)
        running = resolved.get("max_running_requests")
        self._count_cap = 2 * int(running) if running else None
        self._start_loop()
        self._inputs = 0        # inputs handed to SGLang and not finished
        self._tokens = 0        # their tokens

    def kv_capacity_tokens(self) -> int:
        """No KV cache outlives a step: what one prefill step carries is the engine's capacity."""
        return self._step

    def step_token_budget(self) -> int:
        return self._step

    def stats(self) -> EngineStats:
        return EngineStats(running_sequences=self._inputs, kv_used_tokens=0)

    def generate(self, requests: Iterable[GenRequest], cancelled: Callable[[int], bool] | None = None,
                 urgent: Callable[[], list[GenRequest]] | None = None,
                 cancel_epoch: Callable[[], int] | None = None) -> Iterator[EmbedResult]:
        """Requests' inputs into SGLang in stream order while their tokens fit `in_flight_kv` KV pools;
        interactive requests at once. A request SGLang refuses comes back as a result with `error` set."""
        yield from drive(_EmbedCore(self, urgent is not None), requests, cancelled, urgent, cancel_epoch)

    async def _embed(self, ids: list[int]) -> np.ndarray:
        from sglang.srt.managers.io_struct import EmbeddingReqInput

        out = await self.engine.tokenizer_manager.generate_request(EmbeddingReqInput(input_ids=ids), None).__anext__()
        return np.asarray(out["embedding"], dtype=np.float32)
