#!/usr/bin/env python3
"""Tabulate the simulator JSON outputs in this folder into markdown (stdout)."""
import json
import os

D = os.path.dirname(os.path.abspath(__file__))
MIXES = ["mixA", "mixB", "mixC"]
CFGS = [("nanoflow", "budget"), ("sequential", "budget"), ("nanoflow", "balanced")]
POL = ["fcfs", "dfs", "balance", "blendserve"]

out = ["# Blind workloads: simulator results (session 21)", "",
       "Simulator: `python -m scheduler.simulator --workload-file F --json "
       "--overlap O --step-fill S` (defaults otherwise). Cells: fraction of "
       "optimal T* as reported by the tool, then simulated seconds. "
       "`bs/best` = blendserve tokens/s divided by the best tokens/s of "
       "fcfs, dfs, balance. Sharing = achieved prefix-sharing ratio "
       "(dfs_sharing_ratio is the workload's maximum).", ""]
fails = []
for ov, fill in CFGS:
    out += [f"## overlap={ov}, step-fill={fill}", "",
            "| mix | optimal tok/s | " + " | ".join(POL)
            + " | bs/best | best other | bs frac of engine bound | bs sharing / dfs max"
            " | preemptions fcfs/dfs/bal/bs |",
            "|---|---:|" + "---:|" * len(POL) + "---:|---|---:|---:|---:|"]
    for m in MIXES:
        p = os.path.join(D, f"{m}_{ov}_{fill}.json")
        try:
            w = json.load(open(p))["workloads"][0]
        except Exception as e:  # noqa: BLE001
            fails.append(f"{m} {ov} {fill}: {type(e).__name__}: {e}")
            out.append(f"| {m} | FAILED |" + " |" * (len(POL) + 5))
            continue
        pol = w["policies"]
        cells = []
        for k in POL:
            q = pol.get(k)
            cells.append("n/a" if q is None else
                         f"{q['fraction_of_optimal']:.4f} ({q['simulated_seconds']:.0f}s)")
        others = {k: pol[k]["tokens_per_s"] for k in POL[:-1] if k in pol}
        best = max(others, key=others.get)
        bs = pol["blendserve"]
        out.append(f"| {m} | {w['optimal_tokens_per_s']:.0f} | " + " | ".join(cells)
                   + f" | {bs['tokens_per_s']/others[best]:.4f} | {best} | "
                   f"{bs['fraction_of_engine_bound']:.4f} | "
                   f"{bs['sharing_ratio']:.3f} / {w['dfs_sharing_ratio']:.3f} | "
                   + "/".join(str(pol[k].get("preemptions", "?")) for k in POL) + " |")
    out.append("")
if fails:
    out += ["## Failed / missing runs", ""] + [f"- {f}" for f in fails]
print("\n".join(out))
