"""Session 13: per cell BlendServe / best other (FCFS, DFS, Balance) under three tail guards, one overlap mode.

Usage (worktree root): python benchmarks/results/session13/compare.py MODE
- tail first (a variant, not committed): tail_first_grid_MODE.jsonl
- pool-paced (commit 0e436c8, reverted in e84572c): grid_100k_2048_MODE.jsonl (also the baselines' rows)
- old guard (main's, kept): session 12's rows (rho 0.80-0.95, 1.40) and before_new_rows_MODE.jsonl
Prints a rho x sharing matrix of "tail first / pool-paced / old", then per guard the cells, mean, min and
cells below 0.98, and tail first against each other guard on the cells both have.
"""
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RHO = [round(0.80 + 0.05 * i, 2) for i in range(13)]
S = [round(0.05 + 0.10 * i, 2) for i in range(5)]


def rows(path: Path) -> dict:
    if not path.exists():
        return {}
    return {(r["rho"], r["sharing"]): r["ratio"] for r in map(json.loads, path.read_text().splitlines()) if r}


mode = sys.argv[1]
guards = {"tail first": rows(HERE / f"tail_first_grid_{mode}.jsonl"),
          "pool-paced": rows(HERE / f"grid_100k_2048_{mode}.jsonl"),
          "old": rows(HERE.parent / "session12" / f"grid_100k_2048_{mode}.jsonl")
          | rows(HERE / f"before_new_rows_{mode}.jsonl")}
f = lambda d, k: f"{d[k]:.3f}" if k in d else "-"
print(f"**{mode}**: BlendServe / best other, tail first / pool-paced / old guard\n")
print("| rho \\ sharing | " + " | ".join(f"{s:.2f}" for s in S) + " |")
print("|" + "---|" * (len(S) + 1))
for rho in RHO:
    print(f"| {rho:.2f} | " + " | ".join(" / ".join(f(d, (rho, s)) for d in guards.values()) for s in S) + " |")
print()
for name, d in guards.items():
    low = [f"r{k[0]:.2f}-s{k[1]:.2f} {d[k]:.4f}" for k in sorted(d) if d[k] < 0.98]
    print(f"- {name}: {len(d)} cells, mean {statistics.mean(d.values()):.4f}, min {min(d.values()):.4f}; "
          f"below 0.98: {', '.join(low) or 'none'}")
for a, b in (("pool-paced", "old"), ("tail first", "pool-paced"), ("tail first", "old")):
    x, y = guards[a], guards[b]
    both = [k for k in x if k in y]
    if both:
        print(f"- {a} vs {b} on {len(both)} shared cells: mean {statistics.mean(x[k] for k in both):.4f} "
              f"vs {statistics.mean(y[k] for k in both):.4f}; higher in {sum(x[k] > y[k] + 1e-9 for k in both)}, "
              f"lower in {sum(x[k] < y[k] - 1e-9 for k in both)}")
