"""The BlendServe planner: pure Python + numpy, no I/O (DESIGN.md section 3)."""
