"""SGLang engine for GPU workers: `sglang.Engine` in-process, fed in plan order.

SGLang runs with `schedule_policy="fcfs"` so it admits requests in the order
we submit them (our plan), and we keep only about two KV caches' worth of
tokens in flight: enough to keep its running batch full, few enough that the
plan, not SGLang's queue, decides what runs next. The prompts go in as token
ids (tokenized once at validation). `sglang` is an optional extra and is
imported only when this engine is chosen.

Mixed chunked prefill is on (`enable_mixed_chunk`): one step runs every
running decode plus a prefill chunk, together at most `chunked_prefill_size`
tokens (SGLang takes the running decodes out of the chunk's budget). That is
the step a blend is paced for, so the size is the planner's step budget
(scheduler.planner.plan.STEP_TOKENS, repeated here: the worker never imports
the scheduler) and the worker reports it through step_token_budget().

``BLENDSERVE_SPECULATIVE=ngram`` turns on SGLang's own NGRAM speculation
(``worker.engines.speculative.SpecConfig.sglang``); off unless set.
"""
from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from worker.engines.base import EngineStats, GenRequest, GenResult, device_profile
from worker.engines.speculative import SpecConfig

IN_FLIGHT_KV_MULTIPLE = 2.0
STEP_TOKENS = 2048      # = scheduler.planner.plan.STEP_TOKENS: decodes + prefill chunk per step


class SGLangEngine:
    def __init__(self, model_path: Path, model_name: str, *, tp: int = 1, mem_fraction: float | None = None,
                 speculative: SpecConfig | None = None) -> None:
        import sglang

        kwargs = {"mem_fraction_static": mem_fraction} if mem_fraction else {}
        kwargs.update((speculative or SpecConfig.from_env()).sglang())
        self.model_name = model_name
        self.engine = sglang.Engine(model_path=str(model_path), tp_size=tp, schedule_policy="fcfs",
                                    enable_mixed_chunk=True, chunked_prefill_size=STEP_TOKENS,
                                    log_level="warning", **kwargs)
        info = self.engine.get_server_info()
        self._capacity = int(info.get("max_total_num_tokens") or info["internal_states"][0]["max_total_num_tokens"])
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="sglang-loop")
        self.thread.start()
        self._flight: dict = {}

    def kv_capacity_tokens(self) -> int:
        return self._capacity

    def stats(self) -> EngineStats:
        """Requests handed to SGLang and not finished (some may wait in its queue); KV use: unknown here."""
        return EngineStats(len(self._flight))

    def hardware(self) -> str | None:
        return device_profile()

    def step_token_budget(self) -> int | None:
        """Tokens one mixed step runs (decodes + prefill chunk): what the planner paces a blend to."""
        return STEP_TOKENS

    def generate(self, requests: Iterable[GenRequest],
                 cancelled: Callable[[int], bool] | None = None,
                 urgent: Callable[[], list[GenRequest]] | None = None,
                 cancel_epoch: Callable[[], int] | None = None) -> Iterator[GenResult]:
        """Urgent requests go to SGLang at once, past our in-flight budget; their tokens reach
        `on_tokens` when they finish (not streamed token by token on this engine)."""
        done: queue.Queue = queue.Queue()
        flight: dict[int, tuple[asyncio.Future, int]] = {}
        self._flight = flight
        budget = IN_FLIGHT_KV_MULTIPLE * self._capacity
        stream, used, waiting = iter(requests), 0, None
        callbacks: dict[int, Callable[[list[int]], None]] = {}
        try:
            while True:
                for request in urgent() if urgent is not None else ():
                    fut = asyncio.run_coroutine_threadsafe(self._one(request), self.loop)
                    fut.add_done_callback(lambda f, key=request.key: done.put((key, f)))
                    flight[request.key] = (fut, 0)
                    if request.on_tokens is not None:
                        callbacks[request.key] = request.on_tokens
                while True:
                    if waiting is None:
                        waiting = next(stream, None)
                    if waiting is None:
                        break
                    cost = len(waiting.input_ids) + waiting.params.max_tokens
                    if flight and used + cost > budget:
                        break
                    fut = asyncio.run_coroutine_threadsafe(self._one(waiting), self.loop)
                    fut.add_done_callback(lambda f, key=waiting.key: done.put((key, f)))
                    flight[waiting.key] = (fut, cost)
                    used += cost
                    waiting = None
                if not flight:
                    return
                try:
                    key, fut = done.get(timeout=1.0 if urgent is None else 0.01)
                except queue.Empty:
                    key = None
                if key is not None and key in flight:
                    used -= flight.pop(key)[1]
                    if not fut.cancelled() and fut.exception() is None:
                        result = fut.result()
                        if (cb := callbacks.pop(key, None)) is not None:
                            cb(result.output_ids)
                        yield result
                    elif not fut.cancelled() and fut.exception() is not None:
                        raise fut.exception()
                if cancelled is not None:
                    for k in [k for k in flight if cancelled(k)]:
                        fut, cost = flight.pop(k)
                        fut.cancel()          # cancelling the task makes SGLang abort the request
                        used -= cost
        finally:      # a stream ended early (an error, the worker stopping) leaves nothing running
            for fut, _ in flight.values():
                fut.cancel()

    async def _one(self, r: GenRequest) -> GenResult:
        p = r.params
        params = {"max_new_tokens": p.max_tokens, "temperature": p.temperature, "top_p": p.top_p,
                  "stop": list(p.stop) or None, "presence_penalty": p.presence_penalty,
                  "frequency_penalty": p.frequency_penalty}
        if p.logit_bias:
            params["logit_bias"] = {str(t): b for t, b in p.logit_bias}
        if p.seed is not None:
            params["sampling_seed"] = p.seed
        out = await self.engine.async_generate(input_ids=r.input_ids, sampling_params=params)
        meta = out["meta_info"]
        reason = (meta.get("finish_reason") or {}).get("type")
        if reason == "abort":
            # Our own cancels cancel the future and never read this; an abort SGLang chose itself (a
            # request it cannot serve) must not vanish without a result, or its chunk never settles:
            # raising sends it down the worker's per-request failure path (alone, then its error line).
            raise RuntimeError(f"SGLang aborted the request: {meta.get('finish_reason')}")
        res = GenResult(key=r.key, output_ids=list(out.get("output_ids") or []), text=out["text"],
                        finish_reason="length" if reason == "length" else "stop",
                        prompt_tokens=meta["prompt_tokens"], cached_tokens=meta.get("cached_tokens", 0))
        res.completion_tokens = meta["completion_tokens"]
        return res

    def close(self) -> None:
        self.engine.shutdown()
        self.loop.call_soon_threadsafe(self.loop.stop)
