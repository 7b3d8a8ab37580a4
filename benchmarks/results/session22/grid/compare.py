"""Grid cells before (session21/grid) and after (session22/grid): BlendServe / best other and of T*. Run from the repo root:
python benchmarks/results/session22/grid/compare.py nanoflow_budget sequential_budget nanoflow_balanced"""
import re, sys
def rd(p):
    d = {}
    for l in open(p):
        m = re.match(r"(grid-\S+): BlendServe/best other ([\d.]+).*blendserve ([\d.]+)", l)
        if m: d[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return d
for cfg in sys.argv[1:]:
    a, b = {}, {}
    for part in "AB":
        a.update(rd(f"benchmarks/results/session21/grid/grid_{cfg}_{part}.log"))
        b.update(rd(f"benchmarks/results/session22/grid/grid_{cfg}_{part}.log"))
    ks = [k for k in b if k in a]
    if not ks: continue
    import statistics as st
    print(cfg, len(ks), "cells: before mean %.3f min %.3f T* %.3f | after mean %.3f min %.3f T* %.3f | max drop %.3f max gain %.3f" % (
        st.mean(a[k][0] for k in ks), min(a[k][0] for k in ks), st.mean(a[k][1] for k in ks),
        st.mean(b[k][0] for k in ks), min(b[k][0] for k in ks), st.mean(b[k][1] for k in ks),
        min(b[k][0] - a[k][0] for k in ks), max(b[k][0] - a[k][0] for k in ks)))
