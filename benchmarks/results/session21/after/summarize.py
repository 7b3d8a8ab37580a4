"""Table: BlendServe after the change against the best other order (baselines from the blind runs, where
BlendServe alone was rerun) and against BlendServe before it. Run from the repository root."""
import json
import sys
from pathlib import Path

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent   # after/ or after2/
CONFIGS = [("nanoflow", "budget"), ("sequential", "budget"), ("nanoflow", "balanced")]


def load(path: Path) -> dict:
    return json.loads(path.read_text())["workloads"][0]["policies"]


for overlap, fill in CONFIGS:
    print(f"\n{overlap} / {fill}\n| file | FCFS | DFS | Balance | BlendServe before | after | after / best other |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in ["mixA", "mixB", "mixC", "mixD", "mixE", "mixF", "trace1", "trace2", "trace3", "trace4"]:
        now = HERE / f"{name}_{overlap}_{fill}.json"
        if not now.exists():
            continue
        after = load(now)
        if name.startswith("mix"):
            folder = "blind_sim" if name[-1] in "ABC" else "blind_sim2"
            base = load(Path(__file__).parent.parent / folder / f"{name}_{overlap}_{fill}.json")
            before = base["blendserve"]["fraction_of_optimal"]
        else:
            base, before = after, None
        others = {k: base[k]["fraction_of_optimal"] for k in ("fcfs", "dfs", "balance")}
        bs = after["blendserve"]["fraction_of_optimal"]
        b = "-" if before is None else f"{before:.4f}"
        print(f"| {name} | {others['fcfs']:.4f} | {others['dfs']:.4f} | {others['balance']:.4f} | {b} | "
              f"{bs:.4f} | {bs / max(others.values()):.3f} |")
