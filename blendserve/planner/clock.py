"""Wall and CPU seconds per phase of one plan, for Plan.stats (CPU time is the figure that holds on a
shared machine)."""
from __future__ import annotations

import time


class PhaseClock:
    """Laps of the phases of one plan: each lap adds the time since the last to its phase."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._t, self._c = time.perf_counter(), time.process_time()

    def lap(self, phase: str) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._t
        self.cpu[phase] = self.cpu.get(phase, 0.0) + cpu - self._c
        self._t, self._c = now, cpu
