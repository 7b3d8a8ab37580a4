"""What tests and the benchmarks both run: a real deployment, and the engines' own servers as child processes.

The benchmarks import from here, never the other way round, so a benchmark measures exactly what the tests check.
"""
