"""Fraction of T* (prompt-only sharing discount, session 23) per trace, order and engine configuration."""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CFGS = ["nanoflow_budget", "sequential_budget", "nanoflow_balanced"]
POLICIES = ["fcfs", "dfs", "balance", "blendserve"]
print("| trace | engine | " + " | ".join(POLICIES) + " | BlendServe / best other | of engine bound |")
print("|---" * (len(POLICIES) + 4) + "|")
mean = {c: [] for c in CFGS}
for c in CFGS:
    for t in range(1, 5):
        w = json.loads((HERE / f"trace{t}_{c}.json").read_text())["workloads"][0]
        p = w["policies"]
        frac = {k: p[k]["fraction_of_optimal"] for k in POLICIES}
        best = max(frac[k] for k in POLICIES if k != "blendserve")
        mean[c].append(frac["blendserve"])
        print(f"| {t} | {c} | " + " | ".join(f"{frac[k]:.3f}" for k in POLICIES)
              + f" | {frac['blendserve'] / best:.3f} | {p['blendserve']['fraction_of_engine_bound']:.3f} |")
for c in CFGS:
    print(f"mean BlendServe fraction of T*, {c}: {sum(mean[c]) / len(mean[c]):.3f}")
