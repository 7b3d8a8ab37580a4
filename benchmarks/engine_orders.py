"""The CPU engine alone, fed one real file in three orders: the service's plan, DFS, FCFS.

The requests and the plan come from a finished service run's database (e.g. a
``/tmp/bs-cpu-c-*`` directory left by ``benchmarks/cpu_vs_run_batch.py``): the
plan order is the one the service's workers claimed (chunk, position); DFS is
the prompts sorted by token ids (a prefix tree's depth-first order); FCFS is the
file's line order. Each run on a fresh engine in this process's main thread,
greedy, orders interleaved so drift hits each alike; medians of --runs.

Every step is timed, and one least-squares fit over all runs gives the step's
cost as fixed + per token + per decode position read + per prefill attention
pair: the terms say what an order can change (the fixed part is what a blend
saves by merging steps) and what it cannot (tokens cost the same in any order).
With --steps every step's shape and time goes to a JSONL file (one line a run),
from which benchmarks/sim_vs_engine.py fits the simulator's CPU profile.

    PYTHONPATH=. .venv/bin/python -m benchmarks.engine_orders /tmp/bs-cpu-c-XXXX/blendserve.db --runs 3
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from benchmarks.harness import emit  # noqa: E402
from blendserve.core.config import SMOLLM2, Settings  # noqa: E402
from blendserve.core.served import smollm2_checkpoint  # noqa: E402
from blendserve.worker.engines.base import GenRequest, SamplingParams  # noqa: E402
from blendserve.worker.engines.cpu import CpuEngine  # noqa: E402
from blendserve.worker.engines.cpu.scheduler import Step  # noqa: E402

TERMS = ("fixed", "tokens", "decode_positions", "prefill_pairs")


def load(db: Path) -> dict[str, list[GenRequest]]:
    rows = sqlite3.connect(db).execute(
        "select id, line, chunk_id, position, prompt_ids, max_tokens from requests").fetchall()
    req = {r[0]: GenRequest(r[0], np.frombuffer(r[4], dtype="<i4").tolist(),
                            SamplingParams(max_tokens=r[5], temperature=0.0)) for r in rows}
    return {"plan": [req[r[0]] for r in sorted(rows, key=lambda r: (r[2], r[3]))],
            "dfs": sorted(req.values(), key=lambda g: g.input_ids),
            "fcfs": [req[r[0]] for r in sorted(rows, key=lambda r: r[1])]}


def features(step: Step) -> list[float]:
    decodes = [c for c in step.chunks if c.n == 1]
    prefills = [c for c in step.chunks if c.n > 1]
    return [1.0, sum(c.n for c in step.chunks), sum(c.start + 1 for c in decodes),
            sum(c.n * (c.start + c.n) for c in prefills)]


def shape(step: Step) -> dict:
    """What the simulator's step model prices: decodes (count, KV positions read) and prefill chunks."""
    decodes = [c for c in step.chunks if c.n == 1]
    return {"decodes": len(decodes), "decode_positions": sum(c.start + 1 for c in decodes),
            "prefill": [[c.start, c.n] for c in step.chunks if c.n > 1]}


def timed_run(path: Path, reqs: list[GenRequest]) -> tuple[float, list[tuple[float, list[float], Step]]]:
    engine = CpuEngine(path, SMOLLM2, config=Settings().cpu)
    steps: list[tuple[float, list[float], Step]] = []
    run_step = engine._run

    def run(sched, step, *rest):  # time each forward pass with its step's shape (rest: the cut-in hook)
        t = time.perf_counter()
        finished = run_step(sched, step, *rest)
        steps.append((time.perf_counter() - t, features(step), step))
        return finished

    engine._run = run
    t = time.perf_counter()
    results = list(engine.generate(reqs))
    assert len(results) == len(reqs)
    return time.perf_counter() - t, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("db", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--orders", nargs="+", default=["plan", "dfs", "fcfs"])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--steps", type=Path, help="append every run's steps (seconds and shape) to this JSONL file")
    args = ap.parse_args()
    path = smollm2_checkpoint(Settings())
    orders = load(args.db)
    runs: dict[str, list[dict]] = {o: [] for o in args.orders}
    X, y = [], []
    for _ in range(args.runs):
        for order in args.orders:
            seconds, steps = timed_run(path, orders[order])
            X += [f for _, f, _ in steps]
            y += [t for t, _, _ in steps]
            row = {"db": str(args.db), "order": order, "seconds": round(seconds, 2), "steps": len(steps),
                   "mixed_steps": sum(1 for *_, s in steps if s.prefill_tokens and s.decode_tokens),
                   "prefill_tokens_per_step": round(statistics.mean(s.prefill_tokens for *_, s in steps), 1),
                   "decode_tokens_per_step": round(statistics.mean(s.decode_tokens for *_, s in steps), 1),
                   "terms": [round(sum(f[i] for _, f, _ in steps), 1) for i in range(len(TERMS))],
                   "load": os.getloadavg()[0]}
            row["step_seconds"] = round(sum(t for t, _, _ in steps), 3)
            runs[order].append(row)
            emit(row, args.json)
            if args.steps:
                with args.steps.open("a") as f:
                    f.write(json.dumps({"db": str(args.db), "order": order, "seconds": seconds,
                                        "steps": [[round(t, 6), shape(s)] for t, _, s in steps]}) + "\n")
    coef = np.linalg.lstsq(np.array(X), np.array(y), rcond=None)[0]
    summary = {"db": str(args.db), "fit_seconds_per": dict(zip(TERMS, (float(c) for c in coef))),
               "median_seconds": {o: statistics.median(r["seconds"] for r in rs) for o, rs in runs.items()},
               "predicted_seconds_by_term": {o: dict(zip(TERMS, (round(float(c * t), 2) for c, t in
                                                                 zip(coef, rs[0]["terms"]))))
                                             for o, rs in runs.items()}}
    emit(summary, args.json)


if __name__ == "__main__":
    main()
