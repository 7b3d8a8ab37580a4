"""The simulator against the CPU engine: the same requests, in the same three orders, with the run's outputs.

Inputs are a finished service run's database per file (requests, the plan the
workers claimed, every request's completion tokens) and the engine's measured
runs of it (``benchmarks/engine_orders.py --json ROWS --steps STEPS``). The
engine's step cost is fitted over every measured step in the simulator's own terms
(``tests/harness/step_fit.py``) and turned into a profile (``HardwareProfile.from_step_costs``).
By default a file is predicted with the steps of the *other* files only, so no
file's time is fitted to itself. The simulated engine is the CPU engine's regime:
its step budget, running cap and KV pool (93,200 tokens: 2 GiB of bfloat16 K/V in
16-token blocks), sequential overlap, efficiency 1.

What the simulator cannot copy from the engine, and why it is small here: the
engine samples a request's first token in its last prefill chunk, so a request
of d output tokens runs d - 1 decode steps; the simulator runs d decode steps
after the prefill, so it is fed d - 1 (at least 1: a 1-token answer costs it one
decode the engine does not run). The engine caches whole 16-token blocks; the
simulator's radix cache caches tokens. The time between steps (the scheduler's
Python) is outside the timed forward passes; it is added to the fixed term as
its measured mean per step. Runs more than 10% slower than their order's median
(disturbed by other work on the shared machine) are left out of the fit.

    PYTHONPATH=. .venv/bin/python -m benchmarks.sim_vs_engine --runs ROWS.jsonl --steps STEPS.jsonl
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np

from blendserve.core.config import Settings
from blendserve.core.served import smollm2_checkpoint
from blendserve.planner.perf import HardwareProfile, ModelProfile
from blendserve.planner.workload import Workload
from blendserve.simulator.engine import EngineConfig, simulate
from blendserve.simulator.prefix import build_prefix_trie
from tests.harness.step_fit import TERMS, fit

# The CPU engine's defaults (blendserve/worker/engines/cpu/engine.py): 2 GiB of K/V at 23,040 bytes a token,
# in whole 16-token blocks; 1024 tokens a step; 256 running.
KV_TOKENS = (2 * 2**30 // 23_040) // 16 * 16
STEP_TOKENS = 1024
MAX_RUNNING = 256


def load(db: Path) -> tuple[Workload, dict[str, np.ndarray]]:
    """The run's requests (prompts, max_tokens, outputs as the simulator counts them) and the three orders,
    built as benchmarks/engine_orders.py builds them."""
    rows = sqlite3.connect(db).execute(
        "select line, chunk_id, position, prompt_ids, max_tokens, completion_tokens from requests "
        "order by id").fetchall()
    prompts = [np.frombuffer(r[3], dtype="<i4") for r in rows]
    outputs = [max(r[5] - 1, 1) for r in rows]      # decode steps after the prefill (module docstring)
    w = Workload.from_lists(prompts, [r[4] for r in rows], outputs)
    as_lists = [p.tolist() for p in prompts]
    orders = {"plan": sorted(range(len(rows)), key=lambda i: (rows[i][1], rows[i][2])),
              "dfs": sorted(range(len(rows)), key=lambda i: as_lists[i]),
              "fcfs": sorted(range(len(rows)), key=lambda i: rows[i][0])}
    return w, {k: np.array(v) for k, v in orders.items()}


def profile(coef: dict[str, float], model: ModelProfile) -> HardwareProfile:
    return HardwareProfile.from_step_costs("cpu-fit", model, **{k: coef[k] for k in TERMS})


def compare(w: Workload, orders: dict[str, np.ndarray], measured: dict[str, list[float]], model: ModelProfile,
            hw: HardwareProfile, config: EngineConfig, trie) -> dict:
    """Each measured order simulated: its median, the simulated seconds and their error, and both rankings."""
    out: dict = {"orders": {}}
    for order, seconds in measured.items():
        r = simulate(w, orders[order], model, hw, config, trie=trie)
        med = statistics.median(seconds)
        out["orders"][order] = {"measured_median": med, "measured": seconds, "simulated": round(r.seconds, 2),
                                "error": round(r.seconds / med - 1, 4), "sim_steps": r.steps,
                                "sim_sharing": round(r.sharing_ratio, 3), "sim_preemptions": r.preemptions}
    rank = lambda key: sorted(out["orders"], key=lambda o: out["orders"][o][key])   # noqa: E731
    out["rank_measured"], out["rank_simulated"] = rank("measured_median"), rank("simulated")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, required=True, help="engine_orders.py --json rows")
    ap.add_argument("--steps", type=Path, required=True, help="engine_orders.py --steps runs")
    ap.add_argument("--fit", choices=("others", "all"), default="others",
                    help="fit each file's profile on the other files' steps (default) or on all")
    ap.add_argument("--overlap", default="sequential")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    model = ModelProfile.from_config(smollm2_checkpoint(Settings()), "smollm2-135m")
    measured: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for line in args.runs.read_text().splitlines():
        row = json.loads(line)
        if "order" in row:
            measured[row["db"]][row["order"]].append(row["seconds"])
    # Runs more than 10% slower than their order's median were disturbed (the shared machine): not fitted.
    step_runs = [r for r in map(json.loads, args.steps.read_text().splitlines())
                 if r["seconds"] <= 1.1 * statistics.median(measured[r["db"]][r["order"]])]
    config = EngineConfig(step_tokens=STEP_TOKENS, max_running=MAX_RUNNING, kv_capacity_tokens=KV_TOKENS,
                          overlap=args.overlap, efficiency=1.0)
    for db, by_order in measured.items():
        others = [r for r in step_runs if r["db"] != db] if args.fit == "others" else step_runs
        coef = fit(others or step_runs)
        hw = profile(coef, model)
        w, orders = load(Path(db))
        trie = build_prefix_trie(w)
        out = {"db": db, "fit": args.fit if others else "all (no other file)", "overlap": args.overlap,
               "coef": {k: float(f"{v:.4g}") for k, v in coef.items()}}
        out.update(compare(w, orders, by_order, model, hw, config, trie))
        print(json.dumps(out), flush=True)
        if args.json:
            with args.json.open("a") as f:
                f.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
