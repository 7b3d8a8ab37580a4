"""benchmarks/sim_grid.py or sim_traces.py with the estimator's tail split and the tail placement chosen first.

Usage: variant.py grid|traces VARIANT ARGS...
VARIANT: main (session 16's default: no split) | split (the long-bound samples kept apart, main's
engine-clock placement) | split_late (split, and the rest always laid at the end of the tail's window)
"""
import sys
sys.path.insert(0, ".")
sys.path.insert(0, "benchmarks")
import scheduler.planner.plan  # noqa: F401
import scheduler.simulator.runner as runner  # noqa: E402
pm = sys.modules["scheduler.planner.plan"]
target, variant = sys.argv.pop(1), sys.argv.pop(1)
runner.SPLIT_TAIL_SAMPLES = variant != "main"
if variant == "split_late":
    orig = pm.engine_clock_tail
    pm.engine_clock_tail = lambda *a, stretch, **k: orig(*a, stretch=False, **k)
if target == "grid":
    import sim_grid  # noqa: E402
    sim_grid.main()
else:
    import sim_traces  # noqa: E402
    sim_traces.main()
