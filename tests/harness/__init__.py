"""What tests and the benchmarks both run: a real deployment, the engines' own servers as child processes, the
chaos runs, the step-cost fit, and the parts of the device checks that tests hold in step.

The benchmarks import from here, never the other way round, so a benchmark measures exactly what the tests check.
"""
