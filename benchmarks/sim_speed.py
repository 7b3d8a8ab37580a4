"""Speed of the simulator stack: workload generation, prefix trie, and simulating each policy's order.

Usage: .venv/bin/python benchmarks/sim_speed.py [--requests 50000] [--generate 400000] [--repeats 3]
Reports medians over --repeats (the machine is shared, so single timings are noisy).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from blendserve.planner import HARDWARE, MODELS, POLICIES, plan  # noqa: E402
from blendserve.simulator import workloads  # noqa: E402
from blendserve.simulator.engine import EngineConfig, simulate  # noqa: E402
from blendserve.simulator.prefix import build_prefix_trie  # noqa: E402


def _median(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--generate", type=int, default=400_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    model, hw = MODELS["llama-3.1-8b"], HARDWARE["a100-80gb"]
    kv = EngineConfig().capacity(model, hw) * model.kv_bytes_per_token

    t, w = _median(lambda: workloads.generate("trace1", args.generate), args.repeats)
    print(f"generate trace1, {args.generate} requests ({len(w.tokens) / 1e6:.0f}M prompt tokens): {t:.2f} s")
    t, _ = _median(lambda: build_prefix_trie(w), args.repeats)
    print(f"prefix trie, {args.generate} requests: {t:.2f} s")

    print(f"\n| workload ({args.requests}) | policy | plan s | simulate s | steps | simulated s |")
    print("|---|---|---|---|---|---|")
    for name in ("trace1", "trace2", "trace3", "trace4"):
        w = workloads.generate(name, args.requests)
        trie = build_prefix_trie(w)
        for policy in POLICIES:
            tp, p = _median(lambda: plan(w, model, hw, policy, kv_capacity_bytes=kv), args.repeats)
            ts, r = _median(lambda: simulate(w, p.order, model, hw, trie=trie), args.repeats)
            print(f"| {name} | {policy} | {tp:.2f} | {ts:.2f} | {r.steps} | {r.seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
