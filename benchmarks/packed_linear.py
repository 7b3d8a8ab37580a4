"""F.linear vs oneDNN with the weight packed once (bfloat16, 2 torch threads): SmolLM2-135M's matmul shapes.

    .venv/bin/python benchmarks/packed_linear.py > benchmarks/results/packed_linear.txt
"""
import argparse
import time

import torch
import torch.nn.functional as F


def bench(f, t=1.0):
    """Milliseconds a call, after 3 warm-up calls, over about ``t`` seconds."""
    for _ in range(3):
        f()
    s, r = time.perf_counter(), 0
    while time.perf_counter() - s < t:
        f()
        r += 1
    return (time.perf_counter() - s) / r * 1e3


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    torch.set_num_threads(2)
    for (o, i) in ((3072, 576), (576, 1536), (49152, 576)):
        w = torch.randn(o, i, dtype=torch.bfloat16)
        for M in (16, 128, 256, 1024):
            x = torch.randn(M, i, dtype=torch.bfloat16)
            a = bench(lambda: F.linear(x, w))
            try:
                wp = torch.ops.mkldnn._reorder_linear_weight(w, M)
                b = bench(lambda: torch.ops.mkldnn._linear_pointwise(x, wp, None, "none", [], ""))
                packed = torch.ops.mkldnn._linear_pointwise(x, wp, None, "none", [], "")
                ok = (packed - F.linear(x, w)).abs().max().item()
            except Exception as e:
                b, ok = float("nan"), str(e)[:80]
            fl = 2 * M * o * i
            print(o, i, M, f"linear {a:.3f} ms ({fl / a / 1e6:.0f} GF/s)  "
                  f"packed {b:.3f} ms ({fl / b / 1e6:.0f} GF/s) diff {ok}")


if __name__ == "__main__":
    main()
