"""The sensitivity grid's matrix from the JSON lines `benchmarks/sim_grid.py --rows` appends, one per cell.

Usage: .venv/bin/python benchmarks/grid_rows.py ROWS.jsonl [ROWS.jsonl ...] [--plot grid.png]
Per file (one overlap mode): a rho x sharing matrix of BlendServe / best of FCFS, DFS and Balance with
BlendServe's fraction of T* ("-" where a cell has no row: a run stopped before it), the worst cell, the cells
below 0.98, and the mean fraction of T* per policy. A grid run cell by cell can be stopped at a deadline and
still be read. --plot draws the same matrices as heat maps, one panel per file (needs the `[plot]` extra).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from blendserve.simulator.workloads import GRID_RHO, GRID_SHARING  # noqa: E402


def load(path: Path) -> dict[tuple[float, float], dict]:
    """The file's rows by (rho, sharing) cell."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["rho"], r["sharing"]): r for r in rows}


def report(path: Path) -> str:
    cells = load(path)
    rows = list(cells.values())
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
    out += ["", f"- BlendServe / best other: mean {statistics.mean(ratios):.3f}, "
            f"median {statistics.median(ratios):.3f}, "
            f"min {worst['ratio']:.4f} ({worst['workload']}), max {max(ratios):.3f}; "
            f"BlendServe / DFS: mean {statistics.mean(r['ratio_dfs'] for r in cells.values()):.3f}",
            "- below 0.98: " + (", ".join(f"{r['workload']} {r['ratio']:.4f}" for r in below) or "none"),
            "- mean fraction of T*: " + ", ".join(f"{x} {v:.3f}" for x, v in frac.items())]
    return "\n".join(out)


def plot(paths: list[Path], out: Path) -> None:
    """BlendServe / best other per cell, one heat map per file, on one colour scale centred on 1."""
    from benchmarks.plots import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, len(paths), figsize=(3.6 * len(paths), 4.2), squeeze=False)
    grids = []
    for path in paths:
        cells = load(path)
        grids.append([[cells[(rho, s)]["ratio"] if (rho, s) in cells else float("nan") for s in GRID_SHARING]
                      for rho in GRID_RHO])
    spread = max(abs(v - 1) for g in grids for row in g for v in row if v == v) or 0.01
    for ax, path, grid in zip(axes[0], paths, grids):
        im = ax.imshow(grid, cmap="RdBu", vmin=1 - spread, vmax=1 + spread, aspect="auto", origin="lower")
        ax.set_title(path.stem, fontsize=9)
        ax.set_xticks(range(len(GRID_SHARING)), [f"{s:.2f}" for s in GRID_SHARING], fontsize=7)
        ax.set_yticks(range(len(GRID_RHO)), [f"{r:.2f}" for r in GRID_RHO], fontsize=7)
        ax.set_xlabel("sharing")
    axes[0][0].set_ylabel("rho (compute / memory)")
    fig.colorbar(im, ax=axes[0].tolist(), label="BlendServe / best of FCFS, DFS, Balance")
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rows", nargs="+", type=Path, help="JSON-lines files of sim_grid.py --rows, one overlap mode each")
    ap.add_argument("--plot", type=Path, help="also draw the matrices into this PNG")
    args = ap.parse_args()
    print("\n\n".join(report(p) for p in args.rows))
    if args.plot:
        plot(args.rows, args.plot)
