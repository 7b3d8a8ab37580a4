"""SGLang's in-process engine as the worker runs it: started with the worker's logging kept, its coroutines on
one event loop of their own, what it resolved read back, its events drained (shared by the generation and
the embedding engines)."""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any


def launch(factory: Callable[..., Any], args: dict) -> Any:
    """`factory(**args)` (sglang.Engine), keeping the process's logging: SGLang's configure_logger replaces
    it (basicConfig(force=True)), which would silence the worker's own handlers."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        return factory(**args)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def loop_thread(engine: Any) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """The one event loop every SGLang coroutine of `engine` runs on, running in a daemon thread of its own.
    `engine.loop` points at it, so that a synchronous Engine call fails at once instead of hanging."""
    loop = asyncio.new_event_loop()
    engine.loop = loop
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True, name="sglang-loop")
    thread.start()
    started.wait()
    return loop, thread


def scheduler_info(engine: Any) -> dict:
    """Rank 0's start-up report (max_total_num_tokens, max_req_input_len ...), read without the engine's loop."""
    return dict(engine._scheduler_init_result.scheduler_infos[0])


def resolved_args(server_args: Any) -> dict:
    """SGLang's resolved settings: `resolved_dict()` (0.5.23: every decision of its resolution applied over
    the raw input, which server_args itself keeps), else the object's fields (older releases resolved in
    place)."""
    if callable(getattr(server_args, "resolved_dict", None)):
        return dict(server_args.resolved_dict())
    return dict(vars(server_args))


def drain(events: queue.Queue, timeout: float) -> list:
    """What the loop put in `events`: the first item waited for up to `timeout`, then all that is there."""
    got = []
    try:
        got.append(events.get(timeout=timeout))
        while True:
            got.append(events.get_nowait())
    except queue.Empty:
        pass
    return got
