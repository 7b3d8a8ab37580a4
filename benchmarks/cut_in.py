"""Interactive prompts cutting in between layers of a batch step, the CPU engine alone, on and off.

One engine (SmolLM2-135M-Instruct, the engine's defaults), one batch of --batch
requests (chat prompts, --batch-tokens output tokens each, EOS suppressed so every
run does the same work) run to completion, with short interactive requests
(--chat-tokens each) arriving as a Poisson process at --rate per second, handed
to the engine through its ``urgent`` poll exactly as the worker's lane does.
Modes, interleaved for --runs rounds: the batch alone; the batch with chats and
BLENDSERVE_CPU_CUT_IN on; the same with it off; chats alone (the idle figure).
--rush runs the cut-in mode at several rush caps (batch tokens a step while chats are
about, BLENDSERVE_CPU_RUSH_TOKENS; 0: no cap). Per mode: the batch's run time and its share of the solo run, the
chats' time to first token and end to end, p50/p99, and the step times.

No HTTP, no database: this isolates what the engine's step composition does to
both sides; ``benchmarks/interactive.py`` measures the whole service.

    PYTHONPATH=. .venv/bin/python -m benchmarks.cut_in --runs 3 --out benchmarks/results/cut_in.jsonl
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import time
from collections import deque
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from benchmarks.harness import emit  # noqa: E402
from blendserve.core.config import SMOLLM2, Settings  # noqa: E402
from blendserve.core.served import smollm2_checkpoint  # noqa: E402
from blendserve.worker.engines.base import GenRequest, SamplingParams  # noqa: E402
from blendserve.worker.engines.cpu import CpuEngine  # noqa: E402

TOPICS = ["the sea", "a library", "autumn", "a train station", "bread", "the moon", "a violin", "rain"]


def prompt(tokenizer, text: str) -> list[int]:
    chat = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                         add_generation_prompt=True)
    return tokenizer(chat, add_special_tokens=False)["input_ids"]


def run(engine: CpuEngine, batch: list[GenRequest], chats: list[tuple[float, GenRequest]]) -> dict:
    """The batch and the chats (arrival offset, request) through one generate call; timings."""
    arrivals: deque[tuple[float, GenRequest]] = deque()
    lock = threading.Lock()
    first: dict[int, float] = {}
    sent: dict[int, float] = {}
    done: dict[int, float] = {}
    t0 = time.perf_counter()

    def feed() -> None:
        for offset, request in chats:
            time.sleep(max(0.0, t0 + offset - time.perf_counter()))
            with lock:
                sent[request.key] = time.perf_counter()
                arrivals.append((offset, request))

    def urgent() -> list[GenRequest]:
        with lock:
            out = [r for _, r in arrivals]
            arrivals.clear()
        return out

    def on_tokens(key: int):
        return lambda ids: first.setdefault(key, time.perf_counter())

    chats = [(o, GenRequest(r.key, r.input_ids, r.params, on_tokens=on_tokens(r.key))) for o, r in chats]
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    engine.step_log = []
    batch_end = t0
    for result in engine.generate(iter(batch) if batch else iter(()), urgent=urgent):
        now = time.perf_counter()
        if result.key < 0:
            done[result.key] = now
        else:
            batch_end = now
    while len(done) < len(chats):      # chats alone: the engine returned before the last one arrived
        for result in engine.generate(iter(()), urgent=urgent):
            done[result.key] = time.perf_counter()
        time.sleep(0.001)
    feeder.join()
    ttft = [first[k] - sent[k] for k in done]
    e2e = [done[k] - sent[k] for k in done]
    def q(xs: list[float], p: float) -> float | None:
        return round(float(np.percentile(xs, p)) * 1e3, 1) if xs else None

    return {"batch_s": round(batch_end - t0, 2) if batch else None, "chats": len(done),
            "ttft_p50_ms": q(ttft, 50), "ttft_p99_ms": q(ttft, 99), "e2e_p50_ms": q(e2e, 50),
            "e2e_p99_ms": q(e2e, 99), "steps": len(engine.step_log)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batch-tokens", type=int, default=96)
    ap.add_argument("--chat-tokens", type=int, default=24)
    ap.add_argument("--rate", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rush", default="", help="rush caps to run cut-in at, e.g. 96,192,0 (0: no cap); "
                    "default: the engine's")
    ap.add_argument("--no-cut-in", action=argparse.BooleanOptionalAction, default=True,
                    help="also run with cut-in off (at the first rush cap)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    path = smollm2_checkpoint(Settings())
    engine = CpuEngine(path, SMOLLM2, config=Settings().cpu)
    caps = [int(c) for c in args.rush.split(",")] if args.rush else [engine.rush_tokens]
    modes = [("solo", caps[0])]
    modes += [("cut_in" if len(caps) == 1 else f"cut_in_rush{c}", c) for c in caps]
    modes += [("no_cut_in", caps[0])] if args.no_cut_in else []
    modes += [("idle", caps[0])]
    tok = engine.tokenizer
    no_eos = tuple((e, -100.0) for e in engine.eos)
    rng = random.Random(0)
    batch = [GenRequest(i, prompt(tok, f"Write about {rng.choice(TOPICS)}, note {i}."),
                        SamplingParams(max_tokens=args.batch_tokens, temperature=0.0, logit_bias=no_eos))
             for i in range(args.batch)]
    solo = run(engine, batch, [])
    horizon = solo["batch_s"]
    offsets, t = [], rng.expovariate(args.rate)
    while t < horizon:
        offsets.append(t)
        t += rng.expovariate(args.rate)
    chats = [(o, GenRequest(-1 - j, prompt(tok, f"In one sentence, what is {rng.choice(TOPICS)}? ({j})"),
                            SamplingParams(max_tokens=args.chat_tokens, temperature=0.0, logit_bias=no_eos)))
             for j, o in enumerate(offsets)]
    rows = []
    for r in range(args.runs):
        for mode, cap in modes:
            engine.cut_in = mode != "no_cut_in"
            engine.rush_tokens = cap or 1 << 30
            engine._fresh_cache()
            row = run(engine, [] if mode == "idle" else batch, [] if mode == "solo" else chats)
            row.update(mode=mode, rush=cap, run=r, rate=args.rate, batch=args.batch)
            rows.append(row)
            emit(row, args.out)
    summary = {"summary": True, "rate": args.rate, "batch": args.batch}
    solo_s = statistics.median(x["batch_s"] for x in rows if x["mode"] == "solo")
    for mode, _ in modes[1:]:
        mine = [x for x in rows if x["mode"] == mode]
        for key in ("ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p99_ms"):
            summary[f"{mode}_{key}"] = statistics.median(x[key] for x in mine)
        if mode != "idle":
            summary[f"{mode}_batch_share"] = round(solo_s / statistics.median(x["batch_s"] for x in mine), 3)
    emit(summary, args.out)


if __name__ == "__main__":
    main()
