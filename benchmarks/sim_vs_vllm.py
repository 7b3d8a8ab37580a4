"""The simulator against the vLLM engine: sim_vs_engine.py's check, on steps traced by vllm_engine_orders.py.

vLLM's per-iteration details give each step's prefill tokens and decodes, and
its core's outputs the KV positions the decodes read, but not where a prefill
chunk starts; so the fitted step is fixed + per token + per KV position read +
per decoding sequence (non-negative least squares, the time between outputs as
the frontend sees it). The simulated engine is the worker's vLLM regime:
max_num_batched_tokens a step, max_num_seqs running, vLLM's own pool (its log's
"CPU KV cache size"), prefix hits in whole blocks (block_size), sequential
overlap, efficiency 1. By default it is fitted on every traced run of the
file itself, so the check is how well one linear step model with the
simulator's scheduling reproduces each order's run; with --fit-steps it is
fitted on other files' steps (traced on the same machine), so the check is a
prediction. Either way: is each order within 15% of its measured time, and are
the orders ranked as measured.

    PYTHONPATH=. .venv/bin/python -m benchmarks.sim_vs_vllm DB --steps S.jsonl --runs R.jsonl --pool-tokens 46592
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmarks.sim_vs_engine import compare, load
from blendserve.core.config import Settings
from blendserve.core.served import smollm2_checkpoint
from blendserve.planner.perf import HardwareProfile, ModelProfile
from blendserve.simulator.engine import EngineConfig
from blendserve.simulator.prefix import build_prefix_trie
from blendserve.worker.engines.vllm import VllmOptions
from tests.harness.step_fit import nnls

TERMS = ("fixed", "per_token", "per_position", "per_sequence")


def fit(runs: list[dict]) -> dict[str, float]:
    """Step-cost coefficients over every traced step: [dt, prefill reqs, prefill tokens, decodes, positions, ...]."""
    X = np.array([[1.0, s[2] + s[3], s[4], s[3]] for r in runs for s in r["steps"]])
    y = np.array([s[0] for r in runs for s in r["steps"]])
    return dict(zip(TERMS, (float(c) for c in nnls(X, y))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("db", type=Path, help="the service run whose requests and plan the engine ran")
    ap.add_argument("--steps", type=Path, required=True, help="vllm_engine_orders.py --steps runs")
    ap.add_argument("--runs", type=Path, help="vllm_engine_orders.py --json rows: the measured times (default: "
                                              "the traced runs' own)")
    ap.add_argument("--fit-steps", type=Path, help="fit the step cost on these traced runs (every file in them) "
                                                   "instead of DB's own")
    ap.add_argument("--pool-tokens", type=int, required=True, help="vLLM's KV pool (its 'CPU KV cache size')")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    runs = [r for r in map(json.loads, args.steps.read_text().splitlines()) if str(r["db"]) == str(args.db)]
    measured: dict[str, list[float]] = defaultdict(list)
    for r in map(json.loads, args.runs.read_text().splitlines()) if args.runs else runs:
        if "order" in r and str(r["db"]) == str(args.db):
            measured[r["order"]].append(r["seconds"])
    coef = fit([json.loads(x) for x in args.fit_steps.read_text().splitlines()] if args.fit_steps else runs)
    model = ModelProfile.from_config(smollm2_checkpoint(Settings()), "smollm2-135m")
    hw = HardwareProfile.from_step_costs("vllm-cpu-fit", model, **coef)
    options = VllmOptions()
    config = EngineConfig(step_tokens=options.max_num_batched_tokens, max_running=options.max_num_seqs,
                          kv_capacity_tokens=args.pool_tokens, overlap="sequential", efficiency=1.0,
                          cache_block_tokens=options.block_size)
    w, orders = load(args.db)
    out = {"db": str(args.db), "fitted_on": str(args.fit_steps or args.db),
           "coef": {k: float(f"{v:.4g}") for k, v in coef.items()},
           **compare(w, orders, measured, model, hw, config, build_prefix_trie(w))}
    print(json.dumps(out), flush=True)
    if args.json:
        with args.json.open("a") as f:
            f.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
