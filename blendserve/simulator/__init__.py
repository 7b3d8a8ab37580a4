"""Simulator, workload generator and `simulate` CLI for the BlendServe planner (docs/design.md §3.11).

Pure Python + numpy; matplotlib only for --plot. Nothing here imports the
database, web or engine code.
"""
