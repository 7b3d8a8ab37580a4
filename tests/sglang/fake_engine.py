"""A stand-in for `sglang.Engine` with SGLang 0.5.23's event-loop semantics, for unit tests on any machine.

The real-SGLang tests of this directory run the engine itself (.venv-sglang); this one holds only what
the worker's engine must get right about SGLang's loops (sglang/srt/entrypoints/engine.py and
managers/tokenizer_manager.py):

- `Engine.__init__` leaves `self.loop`, the creating thread's event loop; every synchronous method
  (`get_server_info` ...) runs `self.loop.run_until_complete(...)`.
- The first request, or `get_internal_state`, attaches the only output reader (`handle_loop`) to the loop
  running at that moment (`auto_create_handle_loop`, once), and, on the main thread, installs SIGTERM and
  SIGQUIT handlers on that loop.
- A request waits on an event, with no timeout, that only `handle_loop` sets.
- Sampling params are checked as `SamplingParams.verify` does: top_p in (0, 1], logit_bias ids < vocab.
- Speculative decoding turns mixed chunks off and caps running requests at 48 (arg_groups/speculative_hook).
- `Engine.__init__` reconfigures the process's logging (`configure_logger`: basicConfig(force=True)).
- The scheduler's start-up report (`_scheduler_init_result.scheduler_infos`) carries max_total_num_tokens;
  `get_server_info()["internal_states"]` does not.
Output: token i of a request is (sum of its prompt + i) mod vocab, one token per scheduler step.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from types import SimpleNamespace

VOCAB = 1000


class _State:
    def __init__(self, rid: str, input_ids: list[int], params: dict, stream: bool) -> None:
        self.rid, self.input_ids, self.params, self.stream = rid, input_ids, params, stream
        self.event = asyncio.Event()
        self.out: list[dict] = []
        self.finished = False
        self.priority: int | None = None


class _Args(SimpleNamespace):
    """SGLang 0.5.23's ServerArgs: the raw input as fields, the resolution in resolved_dict()."""

    def __init__(self, raw: dict, resolved: dict) -> None:
        super().__init__(**raw)
        self._resolved = resolved

    def resolved_dict(self) -> dict:
        return dict(self._resolved)


class FakeTokenizerManager:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.event_loop: asyncio.AbstractEventLoop | None = None
        self.signal_handlers = False
        self.model_config = SimpleNamespace(vocab_size=VOCAB)
        self.socket: queue.Queue = queue.Queue()      # the detokenizer's outputs, read only by handle_loop
        self.states: dict[str, _State] = {}
        self.aborted: list[str] = []

    def auto_create_handle_loop(self) -> None:
        if self.event_loop is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
        loop.create_task(self.handle_loop())
        self.event_loop = loop
        if threading.current_thread() is threading.main_thread():
            self.signal_handlers = True     # SGLang: loop.add_signal_handler(SIGTERM/SIGQUIT, ...)

    async def handle_loop(self) -> None:
        while True:
            try:
                rid, out, finished = self.socket.get_nowait()
            except queue.Empty:
                await asyncio.sleep(0.001)
                continue
            state = self.states.get(rid)
            if state is not None:
                state.out.append(out)
                state.finished = finished
                state.event.set()
                if finished:
                    del self.states[rid]

    async def get_loads(self, include=None, dp_rank=None) -> list[SimpleNamespace]:
        self.auto_create_handle_loop()
        e = self.engine
        return [SimpleNamespace(num_running_reqs=e.running_now, num_waiting_reqs=e.waiting_now)]

    async def get_internal_state(self) -> list[dict]:
        self.auto_create_handle_loop()
        return [{"last_gen_throughput": 0.0, "effective_max_running_requests_per_dp": self.engine.running_cap}]

    async def generate_request(self, input_ids: list[int], params: dict, stream: bool, priority: int | None = None):
        self.auto_create_handle_loop()
        if params.get("temperature", 1.0) < 0:
            raise ValueError(f"temperature must be a non-negative finite number, got {params['temperature']}.")
        top_p = params.get("top_p", 1.0)
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
        for t in params.get("logit_bias") or {}:
            if not 0 <= int(t) < VOCAB:
                raise ValueError(f"logit_bias must has keys in [0, {VOCAB - 1}], got {t}.")
        rid = f"r{id(params)}-{time.monotonic_ns()}"
        state = self.states[rid] = _State(rid, input_ids, params, stream)
        state.priority = priority
        self.engine.scheduler_inbox.put(rid)
        try:
            while True:
                await state.event.wait()      # no timeout: only handle_loop sets it
                state.event.clear()
                out = state.out[-1]
                if state.finished or stream:
                    yield out
                if state.finished:
                    return
        except BaseException:
            self.aborted.append(rid)
            self.engine.scheduler_aborts.add(rid)
            self.states.pop(rid, None)
            raise


class FakeEngine:
    eos_after: int | None = None      # the nth token of every output is an EOS (SGLang keeps it among output_ids)

    def __init__(self, **kwargs) -> None:
        logging.basicConfig(level=logging.WARNING, format="[sglang] %(message)s", force=True)  # configure_logger
        self.kwargs = kwargs
        speculative = kwargs.get("speculative_algorithm") is not None
        capacity = kwargs.get("max_total_tokens") or 4096
        # As in 0.5.23: server_args keeps the raw input; what SGLang decided is in resolved_dict(), and the
        # scheduler's own running cap (bounded by the KV pool by default) only in its internal state.
        self.server_args = _Args(dict(kwargs), dict(
            kwargs, enable_mixed_chunk=bool(kwargs.get("enable_mixed_chunk")) and not speculative,
            chunked_prefill_size=kwargs.get("chunked_prefill_size", 8192), dp_size=1,
            enable_priority_scheduling=bool(kwargs.get("enable_priority_scheduling")),
            max_running_requests=kwargs.get("max_running_requests") or (48 if speculative else None)))
        self.priorities = bool(kwargs.get("enable_priority_scheduling"))
        self._scheduler_init_result = SimpleNamespace(scheduler_infos=[{"max_total_num_tokens": capacity,
                                                                        "max_req_input_len": capacity - 1}])
        self.tokenizer_manager = FakeTokenizerManager(self)
        self.scheduler_inbox: queue.Queue = queue.Queue()
        self.scheduler_aborts: set[str] = set()
        self.admitted: list[list[int]] = []       # prompts in the order the scheduler took them
        self.running_cap = kwargs.get("max_running_requests") or (48 if speculative else capacity // 2)
        self.running_now = self.waiting_now = self.most_waiting = 0
        self._stop = threading.Event()
        self._scheduler = threading.Thread(target=self._schedule, daemon=True, name="fake-scheduler")
        self._scheduler.start()
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            try:
                self.loop = asyncio.get_event_loop_policy().get_event_loop()
            except RuntimeError:
                self.loop = asyncio.new_event_loop()
                asyncio.set_event_loop(self.loop)

    def _schedule(self) -> None:
        running: dict[str, list[int]] = {}
        waiting: list[str] = []
        while not self._stop.is_set():
            try:
                while True:
                    waiting.append(self.scheduler_inbox.get_nowait())
            except queue.Empty:
                pass
            self.most_waiting = max(self.most_waiting, len(waiting))
            if self.priorities:       # SGLang's priority scheduling: higher first, then arrival (a stable sort)
                states = self.tokenizer_manager.states
                waiting.sort(key=lambda r: -(states[r].priority or 0) if r in states else 0)
            while waiting and len(running) < self.running_cap:
                rid = waiting.pop(0)
                state = self.tokenizer_manager.states.get(rid)
                if state is not None and rid not in self.scheduler_aborts:
                    running[rid] = []
                    self.admitted.append(state.input_ids)
            self.running_now, self.waiting_now = len(running), len(waiting)
            for rid in list(running):
                state = self.tokenizer_manager.states.get(rid)
                if rid in self.scheduler_aborts or state is None:
                    del running[rid]
                    continue
                ids = running[rid]
                ids.append((sum(state.input_ids) + len(ids)) % VOCAB)
                eos = self.eos_after is not None and len(ids) >= self.eos_after
                done = eos or len(ids) >= state.params["max_new_tokens"]
                finish = {"type": "stop", "matched": ids[-1]} if eos else {"type": "length", "length": len(ids)}
                meta = {"prompt_tokens": len(state.input_ids), "completion_tokens": len(ids), "cached_tokens": 0,
                        "finish_reason": finish if done else None}
                out = {"text": " ".join(map(str, ids)), "output_ids": list(ids), "meta_info": meta}
                self.tokenizer_manager.socket.put((rid, out, done))
                if done:
                    del running[rid]
            time.sleep(0.002)

    def get_server_info(self) -> dict:
        states = self.loop.run_until_complete(self.tokenizer_manager.get_internal_state())
        return {**self._scheduler_init_result.scheduler_infos[0], "internal_states": states}

    async def async_generate(self, input_ids=None, sampling_params=None, stream: bool = False, priority=None, **kw):
        generator = self.tokenizer_manager.generate_request(input_ids, sampling_params, stream, priority)
        if stream is True:
            return generator
        return await generator.__anext__()

    def shutdown(self) -> None:
        self._stop.set()
