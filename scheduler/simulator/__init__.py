"""Simulator, workload generator and `simulate` CLI for the BlendServe planner (issue 3, items 8-10).

Pure Python + numpy; matplotlib only for --plot. Nothing here imports the
database, web or engine code.
"""
