"""Split a sim_grid.py result by where DFS order puts the memory-dense dataset (OpenVid).

DFS runs datasets one after another in the lexicographic order of their
template tokens, which are random per workload. When the long generations sort
first, DFS starts them all at once, close to the best schedule for them; when
they sort later, DFS leaves them an unblended tail. This script regenerates
each grid workload (same --requests and --seed as the grid run), finds the
OpenVid position in DFS order, and reports BlendServe / DFS for both cases.

Usage: .venv/bin/python benchmarks/sim_dfs_placement.py GRID.json
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.simulator import workloads  # noqa: E402


def openvid_first(name: str, n: int, seed: int) -> bool:
    """Whether the first request in prefix (DFS) order is a long generation."""
    w = workloads.generate(name, n, seed=seed)
    first_tokens = w.tokens[w.offsets[:-1]]
    long_gen = w.output_len > 5000
    return bool(first_tokens[long_gen].min() < first_tokens[~long_gen].min())


def main() -> None:
    doc = json.loads(Path(sys.argv[1]).read_text())
    n, seed = doc["args"]["requests"], doc["args"]["seed"]
    groups: dict[bool, list[float]] = {True: [], False: []}
    for wl in doc["workloads"]:
        groups[openvid_first(wl["name"], n, seed)].append(wl["ratio"])
    for first, label in ((True, "OpenVid sorts first in DFS"), (False, "OpenVid sorts later")):
        r = groups[first]
        if r:
            print(f"{label}: {len(r)} workloads, BlendServe / DFS mean {statistics.mean(r):.3f}, "
                  f"min {min(r):.3f}, max {max(r):.3f}")
    print(f"all: mean {np.mean(groups[True] + groups[False]):.3f}")


if __name__ == "__main__":
    main()
