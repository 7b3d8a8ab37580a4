"""Every order on mixG/H/I, three engine configurations: fraction of T* and BlendServe / best other."""
import json
from pathlib import Path

HERE = Path(__file__).parent
print("| file | engine | FCFS | DFS | Balance | BlendServe | / best other |\n|---|---|---:|---:|---:|---:|---:|")
for m in "GHI":
    for cfg in ("nanoflow_budget", "sequential_budget", "nanoflow_balanced"):
        path = HERE / f"mix{m}_{cfg}.json"
        if not path.exists():
            continue
        pol = json.loads(path.read_text())["workloads"][0]["policies"]
        f = {k: v["fraction_of_optimal"] for k, v in pol.items()}
        best = max(f["fcfs"], f["dfs"], f["balance"])
        print(f"| mix{m} | {cfg.replace('_', ', ')} | {f['fcfs']:.4f} | {f['dfs']:.4f} | {f['balance']:.4f} | "
              f"{f['blendserve']:.4f} | {f['blendserve'] / best:.3f} |")
