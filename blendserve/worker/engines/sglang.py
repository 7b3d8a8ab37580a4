"""SGLang engine for GPU workers: `sglang.Engine` in-process, fed in plan order.

One event loop, in one thread of its own, runs every SGLang coroutine. SGLang
reads its scheduler's outputs in a single task (`TokenizerManager.handle_loop`)
that its first request attaches to whatever loop runs that request; a request
awaited on any other loop waits, with no timeout, for an event only that task
sets. So nothing here calls a synchronous `Engine` method (each runs
`Engine.loop.run_until_complete`, which would attach the reader to a loop that
never runs again): the KV capacity comes from the scheduler's start-up report
(`scheduler_infos`), and `Engine.loop` is pointed at the running loop so that
any synchronous call fails at once instead of hanging. The first request runs
in the loop's thread, not the main thread, so SGLang installs no SIGTERM/SIGQUIT
handlers of its own over the worker's (its launch-time SIGQUIT handler stays:
a dying SGLang scheduler takes this process down, and the worker's chunks run
again after their leases, as after any crash).

SGLang runs with `schedule_policy="fcfs"`, so it admits requests in the order
we submit them (our plan), and we keep only about two KV pools' worth of tokens
in flight: enough to keep its running batch full, few enough that the plan, not
SGLang's queue, decides what runs next. Prompts go in as token ids (tokenized
once at validation). Engine and sampling arguments: blendserve/worker/engines/sglang_args.py.

The worker's thread waits on one queue that the loop fills with finished
requests and, for interactive requests, streamed tokens; it sweeps `cancelled`
only when the worker's cancel epoch moved (or every CANCEL_SWEEP_S without one).
`sglang` is an optional extra and is imported only when this engine is chosen.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import queue
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from blendserve.core.engine_settings import SglangSettings
from blendserve.worker.engines.base import EngineStats, GenRequest, GenResult, device_profile
from blendserve.worker.engines.driver import CoreDefaults, Feed, Tokens, drive
from blendserve.worker.engines.sglang_args import (
    Refused,
    engine_args,
    logprob_entries,
    logprob_kwargs,
    priority,
    sampling_params,
    sglang_running_cap,
    without_stop_token,
)
from blendserve.worker.engines.sglang_runtime import drain, launch, loop_thread, resolved_args, scheduler_info
from blendserve.worker.engines.speculative import SpecConfig

URGENT_POLL_S = 0.02     # how often the lane is asked for interactive requests while results are awaited
CANCEL_SWEEP_S = 1.0     # without a cancel epoch: how often every request in flight is checked
STATE_WAIT_S = 60.0      # for the scheduler's internal state at start

log = logging.getLogger("blendserve.worker")


class _SGLangCore(CoreDefaults):
    """One stream on SGLang: each request a task on the engine's loop, about `in_flight_kv` KV pools of
    prompt + max_tokens (and at most twice the running cap) of them in flight."""

    sweep_s = CANCEL_SWEEP_S

    def __init__(self, engine: SGLangEngine, interactive: bool) -> None:
        self.engine = engine
        self.events: queue.Queue = queue.Queue()
        self.flight: dict[int, tuple[Future, int]] = {}
        engine._flight = self.flight
        self.budget = engine.options.in_flight_kv * engine._capacity
        self.count_cap = 2 * engine._running_cap if engine._running_cap else None
        self.used = 0
        self.wait_s = URGENT_POLL_S if interactive else CANCEL_SWEEP_S

    def fits(self, request: GenRequest) -> bool:
        cost = len(request.input_ids) + request.params.max_tokens
        return not self.flight or (self.used + cost <= self.budget and
                                   (self.count_cap is None or len(self.flight) < self.count_cap))

    def add(self, request: GenRequest, urgent: bool) -> None:
        cost = 0 if urgent else len(request.input_ids) + request.params.max_tokens
        rank = -1 if urgent else next(self.engine._order)
        self.flight[request.key] = (self.engine._submit(request, self.events, rank), cost)
        self.used += cost

    def abort(self, keys: list[int]) -> None:
        for key in keys:
            if (got := self.flight.pop(key, None)) is not None:
                got[0].cancel()          # cancelling the task makes SGLang abort the request
                self.used -= got[1]

    def busy(self) -> bool:
        return bool(self.flight)

    def step(self, feed: Feed) -> Iterator[GenResult | Tokens]:
        for kind, key, value in drain(self.events, self.wait_s):
            if key not in self.flight:
                continue                        # cancelled meanwhile
            if kind == "tokens":
                choice, ids, entries = value
                yield Tokens(key, ids, choice, entries)
                continue
            self.used -= self.flight.pop(key)[1]
            if value.cancelled():
                continue
            if (exc := value.exception()) is not None:
                raise exc
            yield value.result()

    def close(self) -> None:
        for fut, _ in self.flight.values():
            fut.cancel()
        self.flight.clear()


class SGLangBase:
    """What SGLang's generation and embedding engines share: `sglang.Engine` started keeping the process's
    logging, its KV pool from the start-up report, the one event loop, the device, and the shutdown."""

    engine: Any
    loop: asyncio.AbstractEventLoop

    def _launch(self, factory: Callable[..., Any] | None, args: dict) -> None:
        """`factory`: what builds the SGLang engine from keyword arguments (None: sglang.Engine)."""
        if factory is None:
            import sglang

            factory = sglang.Engine
        self.engine = launch(factory, args)
        self._capacity = int(scheduler_info(self.engine)["max_total_num_tokens"])

    def _start_loop(self) -> None:
        self.loop, self.thread = loop_thread(self.engine)

    def hardware(self) -> str | None:
        return device_profile()

    def close(self) -> None:
        self.engine.shutdown()
        self.loop.call_soon_threadsafe(self.loop.stop)


class SGLangEngine(SGLangBase):
    def __init__(self, model_path: Path, model_name: str, *, options: SglangSettings, tp: int = 1,
                 speculative: SpecConfig | None = None, factory: Callable[..., Any] | None = None) -> None:
        """`options`: the deployment's SGLang settings; `speculative`: its speculation (None: off); `factory`:
        what builds the SGLang engine from keyword arguments (sglang.Engine)."""
        self.model_name = model_name
        self.options = options
        spec = speculative or SpecConfig()
        self._launch(factory, engine_args(Path(model_path), self.options, tp=tp, spec=spec))
        # What SGLang settled on (speculation turns mixing off and caps running requests), not what we asked:
        # engine.server_args keeps the raw input in 0.5.23; its resolution is resolved_dict().
        resolved = resolved_args(self.engine.server_args)
        self._mixed = bool(resolved.get("enable_mixed_chunk"))
        self._step = int(resolved.get("chunked_prefill_size") or self.options.chunked_prefill_size)
        self._priorities = bool(resolved.get("enable_priority_scheduling"))
        self._vocab = int(self.engine.tokenizer_manager.model_config.vocab_size)
        self._start_loop()
        # The scheduler's own running cap (SGLang's default is bounded by the KV pool), asked on the one loop.
        states = asyncio.run_coroutine_threadsafe(self.engine.tokenizer_manager.get_internal_state(),
                                                  self.loop).result(STATE_WAIT_S)
        self._running_cap = sglang_running_cap({"internal_states": states, "dp_size": resolved.get("dp_size"),
                                                "max_running_requests": resolved.get("max_running_requests")})
        self._order = itertools.count()      # each batch request's place in the plan: its SGLang priority
        self._flight: dict = {}
        log.info("SGLang resolved for %s: KV %d tokens, running cap %s, mixed chunks %s, step %d tokens, "
                 "priority scheduling %s", model_name, self._capacity, self._running_cap or "unknown",
                 self._mixed, self._step, self._priorities)

    def kv_capacity_tokens(self) -> int:
        return self._capacity

    def stats(self) -> EngineStats:
        """Requests handed to SGLang and not finished (some may wait in its queue); KV use: unknown here."""
        return EngineStats(len(self._flight))

    def step_token_budget(self) -> int | None:
        """Tokens one mixed step runs (decodes + prefill chunk), what the planner paces a blend to; None when
        SGLang runs prefills and decodes in separate steps (speculative decoding turns mixing off)."""
        return self._step if self._mixed else None

    def generate(self, requests: Iterable[GenRequest],
                 cancelled: Callable[[int], bool] | None = None,
                 urgent: Callable[[], list[GenRequest]] | None = None,
                 cancel_epoch: Callable[[], int] | None = None) -> Iterator[GenResult]:
        """Urgent requests go to SGLang at once, past our in-flight budget; their tokens reach `on_tokens`
        as SGLang streams them. A request SGLang refuses comes back as a result with `error` set."""
        yield from drive(_SGLangCore(self, urgent is not None), requests, cancelled, urgent, cancel_epoch)

    def _submit(self, request: GenRequest, events: queue.Queue, seq: int) -> Future:
        """`seq`: the request's place in the plan (negative: interactive), its SGLang priority."""
        fut = asyncio.run_coroutine_threadsafe(self._one(request, events, priority(seq)), self.loop)
        fut.add_done_callback(lambda f, key=request.key: events.put(("done", key, f)))
        return fut

    async def _one(self, r: GenRequest, events: queue.Queue, rank: int) -> GenResult:
        try:
            if r.input_ids and not 0 <= min(r.input_ids) <= max(r.input_ids) < self._vocab:
                raise Refused(f"the prompt holds a token id outside the model's vocabulary (0 to {self._vocab - 1}).")
            params = sampling_params(r.params, self._vocab, deterministic=self.options.deterministic)
        except Refused as e:
            return self._refused(r, str(e))
        streamed = r.on_tokens is not None
        extra = logprob_kwargs(r.params)
        order = {"priority": rank} if self._priorities else {}
        try:
            if streamed:
                sent: dict[int, int] = {}
                last: dict[int, dict] = {}
                gen = await self.engine.async_generate(input_ids=r.input_ids, sampling_params=params, stream=True,
                                                       **extra, **order)
                async for out in gen:
                    i = int(out.get("index") or 0)
                    last[i] = out
                    ids = without_stop_token(list(out.get("output_ids") or []),
                                             out["meta_info"].get("finish_reason"))
                    if len(ids) > sent.get(i, 0):
                        entries = logprob_entries(out["meta_info"], sent.get(i, 0))
                        events.put(("tokens", r.key, (i, list(ids[sent.get(i, 0):]),
                                                      entries[:len(ids) - sent.get(i, 0)] if entries else entries)))
                        sent[i] = len(ids)
                outs = [last[i] for i in sorted(last)]
            else:
                out = await self.engine.async_generate(input_ids=r.input_ids, sampling_params=params, **extra, **order)
                outs = out if isinstance(out, list) else [out]
        except ValueError as e:      # SGLang's own checks of one request (its sampling params, its length)
            return self._refused(r, f"SGLang refused the request: {e}")
        results = []
        for out in outs:
            meta = out["meta_info"]
            finish = meta.get("finish_reason") or {}
            if finish.get("type") == "abort":
                # Our own cancels cancel the task and never read this; an abort SGLang chose itself is this
                # request's failure alone.
                return self._refused(r, f"SGLang aborted the request: {finish.get('message') or finish}")
            ids = without_stop_token(list(out.get("output_ids") or []), finish)
            res = GenResult(key=r.key, output_ids=ids, text=out.get("text") or "",
                            finish_reason="length" if finish.get("type") == "length" else "stop",
                            prompt_tokens=meta["prompt_tokens"], cached_tokens=meta.get("cached_tokens", 0),
                            logprobs=(logprob_entries(meta) or [])[:len(ids)] if extra else None)
            res.completion_tokens = meta["completion_tokens"]
            results.append(res)
        first, *rest = results
        if rest:              # n choices: one result, usage summing them
            first.choices = rest
            first.completion_tokens += sum(c.completion_tokens for c in rest)
        return first

    @staticmethod
    def _refused(r: GenRequest, message: str) -> GenResult:
        return GenResult(key=r.key, output_ids=[], text="", finish_reason="stop", prompt_tokens=len(r.input_ids),
                         cached_tokens=0, error=message)
