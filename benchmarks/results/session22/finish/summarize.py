"""Table: BlendServe with short_finish against the best other order and against BlendServe before it
(session 21: after2/ for the mixes, after/ for the traces). Run from the repository root: python summarize.py [DIR]."""
import json
import sys
from pathlib import Path

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
S21 = Path(__file__).resolve().parents[2] / "session21"
CONFIGS = [("nanoflow", "budget"), ("sequential", "budget"), ("nanoflow", "balanced")]


def load(path: Path) -> dict:
    return json.loads(path.read_text())["workloads"][0]["policies"]


for overlap, fill in CONFIGS:
    print(f"\n{overlap} / {fill}\n| file | FCFS | DFS | Balance | BlendServe before | after | after / best other |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for name in ["mixA", "mixB", "mixC", "mixD", "mixE", "mixF", "trace1", "trace2", "trace3", "trace4"]:
        now = HERE / f"{name}_{overlap}_{fill}.json"
        if not now.exists():
            continue
        key = f"{name}_{overlap}_{fill}.json"
        if name.startswith("mix"):
            base = load(S21 / ("blind_sim" if name[-1] in "ABC" else "blind_sim2") / key)
            before = load(S21 / "after2" / key)["blendserve"]["fraction_of_optimal"]
        else:
            base = load(S21 / "after" / key)
            before = base["blendserve"]["fraction_of_optimal"]
        others = {k: base[k]["fraction_of_optimal"] for k in ("fcfs", "dfs", "balance")}
        bs = load(now)["blendserve"]["fraction_of_optimal"]
        ratios.append(bs / max(others.values()))
        print(f"| {name} | {others['fcfs']:.4f} | {others['dfs']:.4f} | {others['balance']:.4f} | {before:.4f} | "
              f"{bs:.4f} | {ratios[-1]:.3f} |")
    if ratios:
        print(f"\nworst {min(ratios):.3f}, mean {sum(ratios) / len(ratios):.3f}")
