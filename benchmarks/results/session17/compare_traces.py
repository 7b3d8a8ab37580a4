"""Traces 1-4, seeds 0-3: BlendServe with the estimator's tail split (VARIANT: split | split_late) against main
(session 16's engine clock), each against the best of FCFS, DFS and Balance of the same seed (session 16's rows
for seed 0 and for seed 2 of traces 1 and 4; this session's for the rest)."""
import json
import sys

VARIANT = sys.argv[1] if len(sys.argv) > 1 else "split"   # split | split_late
S16, S17 = "benchmarks/results/session16", "benchmarks/results/session17"


def load(path):
    try:
        return {w["name"]: w for w in json.load(open(path))["workloads"]}
    except FileNotFoundError:
        return {}


def tps(w, p):
    return w["policies"][p]["tokens_per_s"]


print("| seed | mode | trace | best other of T* | main of T* | split of T* | main / best other | split / best other |")
print("|---|---|---|---|---|---|---|---|")
for seed in (0, 1, 2, 3):
    for mode in ("nanoflow", "sequential"):
        base = load(f"{S16}/traces_auto_{mode}.json") if seed == 0 else \
            {**load(f"{S16}/traces_seed2_auto_{mode}.json"), **load(f"{S17}/traces_main_s2_t23_{mode}.json")} \
            if seed == 2 else load(f"{S17}/traces_main_all_s{seed}_{mode}.json")
        split = load(f"{S17}/traces_{VARIANT}_s{seed}_{mode}.json")
        for name in sorted(split):
            if name not in base:
                continue
            b = base[name]
            best = max(tps(b, p) for p in ("fcfs", "dfs", "balance"))
            opt = b["optimal_tokens_per_s"]
            print(f"| {seed} | {mode} | {name} | {best / opt:.3f} | {tps(b, 'blendserve') / opt:.3f} | "
                  f"{tps(split[name], 'blendserve') / opt:.3f} | {tps(b, 'blendserve') / best:.3f} | "
                  f"{tps(split[name], 'blendserve') / best:.3f} |")
