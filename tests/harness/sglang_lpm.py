"""SGLang's own `lpm` order as the GPU check's baseline (benchmarks/gpu_check.py), and the check's one table.

SGLang sorts by prefix only while at most 128 requests wait (more, and `lpm` falls back to FCFS:
WAITING_QUEUE_PREFIX_MATCH_MAX in its schedule_policy.py), so the `lpm` run submits in windows: at most
LPM_WINDOW requests waiting in SGLang or on their way to it, as its load snapshot shows them.
"""
from __future__ import annotations

import asyncio
from typing import Any

LPM_QUEUE_MAX = 128   # SGLang's lpm sorts the waiting queue only while it holds at most this many
# What the lpm run aims at: below SGLang's limit by a margin for its load snapshot's lag (published every
# few forward passes, so requests that just finished or just arrived are counted a moment late).
LPM_WINDOW = 112
POLL_S = 0.02


async def submit_in_windows(engine: Any, ids: list[list[int]], params: list[dict], window: int = LPM_WINDOW,
                            poll_s: float = POLL_S) -> list[dict]:
    """Every request through `engine.async_generate`, with at most `window` of them waiting: in SGLang's
    queue (its load snapshot, `get_loads`) or sent and not yet counted there. Runs on the engine's own loop
    (`Engine.loop`), the one that reads its outputs. Without a snapshot, every unfinished request counts as
    waiting (never more than `window` in flight)."""
    tm = engine.tokenizer_manager
    tasks: list[asyncio.Future] = []
    sent = 0
    while sent < len(ids):
        loads = await tm.get_loads(include=["core"])
        waiting = sum(load.num_waiting_reqs for load in loads)
        running = sum(load.num_running_reqs for load in loads)
        unfinished = sum(not t.done() for t in tasks)
        unseen = max(0, unfinished - running - waiting)      # sent, not in the snapshot yet
        room = window - waiting - unseen if loads else window - unfinished
        for _ in range(max(0, min(room, len(ids) - sent))):
            call = engine.async_generate(input_ids=ids[sent], sampling_params=params[sent])
            tasks.append(asyncio.ensure_future(call))
            sent += 1
        await asyncio.sleep(poll_s)
    return list(await asyncio.gather(*tasks))


def table(res: dict[str, dict]) -> str:
    """One row an order, its run tokens/s against BlendServe's; `-` where no cached share was measured
    (SGLang's own run)."""
    lines = [f"{'order':<12} {'run tok/s':>10} {'cached':>7} {'vs BlendServe':>14}"]
    base = res["blendserve"]["run_tok_s"]
    for name, r in res.items():
        cached = f"{r['cached_share']:.1%}" if "cached_share" in r else "-"
        lines.append(f"{name:<12} {r['run_tok_s']:>10.1f} {cached:>7} {r['run_tok_s'] / base:>13.3f}x")
    return "\n".join(lines)
