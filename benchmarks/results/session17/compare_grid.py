"""Grid rows of the estimator's tail split against session 16's main (engine clock), per cell and mode.

Usage: compare_grid.py [VARIANT (split)] [-v]
"""
import json
import statistics
import sys


def rows(*paths):
    out = {}
    for path in paths:
        try:
            out.update({json.loads(l)["workload"]: json.loads(l) for l in open(path)})
        except FileNotFoundError:
            pass
    return out


variant = next((a for a in sys.argv[1:] if not a.startswith("-")), "split")
for mode in ("nanoflow", "sequential"):
    main = rows(*(["benchmarks/results/session15/auto_nanoflow.jsonl"] if mode == "nanoflow" else []),
                f"benchmarks/results/session16/auto_{mode}.jsonl")
    new = rows(f"benchmarks/results/session17/{variant}_{mode}.jsonl")
    both = [w for w in main if w in new]
    if not both:
        continue
    m = [main[w]["ratio"] for w in both]
    n = [new[w]["ratio"] for w in both]
    t = [new[w]["fraction_of_optimal"]["blendserve"] for w in both]
    print(f"{mode}: {len(both)} cells; main mean {statistics.mean(m):.4f} min {min(m):.3f} (<0.98: "
          f"{sum(x < 0.98 for x in m)}); {variant} mean {statistics.mean(n):.4f} min {min(n):.3f} (<0.98: "
          f"{sum(x < 0.98 for x in n)}), better/worse {sum(b > a for a, b in zip(m, n))}/"
          f"{sum(b < a for a, b in zip(m, n))}, of T* mean {statistics.mean(t):.3f}")
    for w in sorted(both, key=lambda w: new[w]["ratio"])[:4]:
        print(f"   {w}: main {main[w]['ratio']:.3f} {variant} {new[w]['ratio']:.3f}")
    if "-v" in sys.argv:
        for w in both:
            print(f"   {w}: {main[w]['ratio']:.3f} -> {new[w]['ratio']:.3f}")
