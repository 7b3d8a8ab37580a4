"""benchmarks/sim_traces.py with the planner's tail placement chosen first.

Usage: traces_variant.py VARIANT SIM_TRACES_ARGS...   VARIANT: guard (tail_guard) | auto (engine_clock_tail)
"""
import sys
sys.path.insert(0, ".")
sys.path.insert(0, "benchmarks")
import scheduler.planner.plan  # noqa: F401
pm = sys.modules["scheduler.planner.plan"]
pm.TAIL_PLACEMENT = "engine_clock" if sys.argv.pop(1) == "auto" else "guard"
import sim_traces  # noqa: E402
sim_traces.main()
