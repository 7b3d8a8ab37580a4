"""The vLLM engine alone, fed one real file in three orders: the service's plan, DFS, FCFS (engine_orders.py for vLLM).

The requests and the plan come from a finished service run's database (the
worker claimed them in plan order: chunk, position). Each run starts a fresh
VllmEngine (the worker's own class and engine arguments, so its max_num_seqs
feeding) with vLLM's per-iteration details on, and records every engine step:
prefill (context) requests and tokens, decode requests, and the seconds
between two steps' outputs as the frontend sees them. Orders are interleaved
so drift hits each alike; medians of --runs. What it is for: whether an order's
run time comes from the engine's steps or from around them, and what the steps
differ in; benchmarks/sim_vs_vllm.py fits the simulator to the steps it records.

    LD_PRELOAD=$PWD/.venv-vllm/lib/libiomp5.so VLLM_CPU_KVCACHE_SPACE=2 PYTHONPATH=. \
        .venv-vllm/bin/python -m benchmarks.vllm_engine_orders /tmp/X/blendserve.db --runs 3 --steps S.jsonl
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.engine_orders import load  # noqa: E402
from benchmarks.harness import emit  # noqa: E402
from blendserve.core.config import SMOLLM2, Settings  # noqa: E402
from blendserve.core.served import smollm2_checkpoint  # noqa: E402
from blendserve.worker.engines.vllm import VllmEngine, VllmOptions  # noqa: E402


@dataclasses.dataclass(frozen=True)
class TracedOptions(VllmOptions):
    """The worker's engine arguments, with vLLM's per-iteration scheduler details logged."""

    def engine_args(self, model_path: Path, model_name: str) -> dict:
        return {**super().engine_args(model_path, model_name), "disable_log_stats": False,
                "enable_logging_iteration_details": True}


def timed_run(path: Path, reqs) -> tuple[float, list[list[float]]]:
    """Seconds for the whole run and one row per engine step: [seconds since the previous step's output,
    prefill requests, prefill tokens, decode requests, KV positions the step's sampled tokens attend to
    (from the engine core's per-step outputs: each request's prompt plus what it has generated), the
    model's own seconds (vLLM's iteration elapsed time: the forward pass and sampling, no scheduling)]."""
    options = VllmOptions.from_settings(Settings().vllm)
    traced = TracedOptions(**{f.name: getattr(options, f.name) for f in dataclasses.fields(options)})
    engine = VllmEngine(path, SMOLLM2, traced)
    core = engine._engine.engine_core
    fetch = core.get_output
    steps: list[list[float]] = []
    last = [0.0]
    prompt = {str(r.key): len(r.input_ids) for r in reqs}
    made = dict.fromkeys(prompt, 0)

    def get_output():
        out = fetch()
        now = time.perf_counter()
        it = out.scheduler_stats.iteration_details if out.scheduler_stats is not None else None
        positions = 0
        for o in out.outputs:
            key = o.request_id.rsplit("-", 1)[0]          # the core's id: ours with a suffix vLLM adds
            made[key] += len(o.new_token_ids)
            positions += prompt[key] + made[key] - 1
        if it is not None and not it.is_dummy:
            steps.append([round(now - last[0], 6), it.num_ctx_requests, it.num_ctx_tokens,
                          it.num_generation_requests, positions, round(it.elapsed_ms / 1000, 6)])
        last[0] = now
        return out

    core.get_output = get_output
    try:
        t = last[0] = time.perf_counter()
        results = list(engine.generate(reqs))
        seconds = time.perf_counter() - t
    finally:
        engine.close()
    assert len(results) == len(reqs)
    return seconds, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("db", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--orders", nargs="+", default=["plan", "dfs", "fcfs"])
    ap.add_argument("--json", type=Path, help="append every run's summary to this JSONL file")
    ap.add_argument("--steps", type=Path, help="append every run's steps to this JSONL file (one line a run)")
    args = ap.parse_args()
    path = smollm2_checkpoint(Settings())
    orders = load(args.db)
    seconds: dict[str, list[float]] = {o: [] for o in args.orders}
    for _ in range(args.runs):
        for order in args.orders:
            s, steps = timed_run(path, orders[order])
            seconds[order].append(s)
            n = max(len(steps), 1)
            row = {"db": str(args.db), "order": order, "seconds": round(s, 2), "steps": len(steps),
                   "mixed_steps": sum(1 for st in steps if st[2] and st[3]),
                   "prefill_only_steps": sum(1 for st in steps if st[2] and not st[3]),
                   "prefill_tokens_per_step": round(sum(st[2] for st in steps) / n, 1),
                   "decodes_per_step": round(sum(st[3] for st in steps) / n, 1),
                   "positions_per_step": round(sum(st[4] for st in steps) / n, 1),
                   "step_seconds": round(sum(st[0] for st in steps), 2), "load": os.getloadavg()[0]}
            emit(row, args.json)
            if args.steps:
                with args.steps.open("a") as f:
                    f.write(json.dumps({"db": str(args.db), "order": order, "seconds": s, "steps": steps}) + "\n")
    summary = {"db": str(args.db), "median_seconds": {o: round(statistics.median(v), 2) for o, v in seconds.items()}}
    emit(summary, args.json)


if __name__ == "__main__":
    main()
