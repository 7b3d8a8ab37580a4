"""engine_clock tail (auto) against main's guard, per grid cell, from the session 13/15/16 rows."""
import json
import statistics
import sys

def rows(path):
    try:
        return {json.loads(l)["workload"]: json.loads(l) for l in open(path)}
    except FileNotFoundError:
        return {}

for mode in ("nanoflow", "sequential"):
    guard = rows(f"benchmarks/results/session13/main_guard_grid_{mode}.jsonl")
    auto = rows(f"benchmarks/results/session16/auto_{mode}.jsonl")
    if mode == "nanoflow":
        auto = {**rows("benchmarks/results/session15/auto_nanoflow.jsonl"), **auto}
    both = [w for w in guard if w in auto]
    if not both:
        continue
    g = [guard[w]["ratio"] for w in both]
    a = [auto[w]["ratio"] for w in both]
    print(f"{mode}: {len(both)} of {len(guard)} cells; guard mean {statistics.mean(g):.4f} min {min(g):.3f} "
          f"(<0.98: {sum(x < 0.98 for x in g)}); engine_clock mean {statistics.mean(a):.4f} min {min(a):.3f} "
          f"(<0.98: {sum(x < 0.98 for x in a)})")
    for w in sorted(both, key=lambda w: auto[w]["ratio"])[:5]:
        print(f"   {w}: guard {guard[w]['ratio']:.3f} engine_clock {auto[w]['ratio']:.3f}")
    if "-v" in sys.argv:
        for w in both:
            print(f"   {w}: {guard[w]['ratio']:.3f} -> {auto[w]['ratio']:.3f}")
