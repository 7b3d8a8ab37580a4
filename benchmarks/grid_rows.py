"""The sensitivity grid's matrix from the JSON lines `benchmarks/sim_grid.py --rows` appends, one per cell.

Usage: .venv/bin/python benchmarks/grid_rows.py ROWS.jsonl [ROWS.jsonl ...]
Per file (one overlap mode): a rho x sharing matrix of BlendServe / best of FCFS, DFS and Balance with
BlendServe's fraction of T* ("-" where a cell has no row: a run stopped before it), the worst cell, the cells below 0.98,
and the mean fraction of T* per policy. A grid run cell by cell can be stopped at a deadline and
still be read.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.simulator.workloads import GRID_RHO, GRID_SHARING  # noqa: E402


def report(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    cells = {(r["rho"], r["sharing"]): r for r in rows}
    first = rows[0]
    out = [f"**{path.name}**: overlap {first['overlap']}, {first['step_tokens']}-token steps, "
           f"{first['requests']} requests, {len(cells)} of {len(GRID_RHO) * len(GRID_SHARING)} cells; "
           "BlendServe / best other (BlendServe's fraction of T*)", "",
           "| rho \\ sharing | " + " | ".join(f"{s:.2f}" for s in GRID_SHARING) + " |",
           "|" + "---|" * (len(GRID_SHARING) + 1)]
    for rho in GRID_RHO:
        out.append(f"| {rho:.2f} | " + " | ".join(
            f"{cells[(rho, s)]['ratio']:.3f} ({cells[(rho, s)]['fraction_of_optimal']['blendserve']:.3f})"
            if (rho, s) in cells else "-" for s in GRID_SHARING) + " |")
    ratios = [r["ratio"] for r in cells.values()]
    worst = min(cells.values(), key=lambda r: r["ratio"])
    below = sorted((r for r in cells.values() if r["ratio"] < 0.98), key=lambda r: r["ratio"])
    policies = list(first["fraction_of_optimal"])
    frac = {x: statistics.mean(r["fraction_of_optimal"][x] for r in cells.values()) for x in policies}
    out += ["", f"- BlendServe / best other: mean {statistics.mean(ratios):.3f}, median {statistics.median(ratios):.3f}, "
            f"min {worst['ratio']:.4f} ({worst['workload']}), max {max(ratios):.3f}; "
            f"BlendServe / DFS: mean {statistics.mean(r['ratio_dfs'] for r in cells.values()):.3f}",
            "- below 0.98: " + (", ".join(f"{r['workload']} {r['ratio']:.4f}" for r in below) or "none"),
            "- mean fraction of T*: " + ", ".join(f"{x} {v:.3f}" for x, v in frac.items())]
    return "\n".join(out)


if __name__ == "__main__":
    print("\n\n".join(report(Path(p)) for p in sys.argv[1:]))
