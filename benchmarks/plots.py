"""matplotlib for the benchmarks that draw a figure, imported only when one is asked for.

matplotlib is the optional extra `[plot]`: a benchmark runs and prints its tables without it, and only its
plotting flag needs it.
"""
from __future__ import annotations

from types import ModuleType


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the file-only Agg backend; a clear exit when the extra is not installed."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("plotting needs matplotlib: pip install 'blendserve[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
