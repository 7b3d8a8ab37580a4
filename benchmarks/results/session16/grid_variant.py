"""benchmarks/sim_grid.py with the planner's tail placement chosen first.

Usage: grid_variant.py VARIANT SIM_GRID_ARGS...   VARIANT: guard (main's tail_guard) | auto (engine_clock_tail)
"""
import sys
sys.path.insert(0, ".")
sys.path.insert(0, "benchmarks")
import scheduler.planner.plan  # noqa: F401
pm = sys.modules["scheduler.planner.plan"]
variant = sys.argv.pop(1)
pm.TAIL_PLACEMENT = "engine_clock" if variant == "auto" else "guard"
pm.TAIL_MODE = variant            # the session's experimental switch (same rule), where plan.py still has it
import sim_grid  # noqa: E402
sim_grid.main()
