"""An idle scheduler ticks less often (its SQL round trips stall a CPU engine's steps), and still takes
new work within a few poll intervals."""
from __future__ import annotations

import threading
import time

from blendserve.scheduler.service import IDLE_TICKS, Scheduler
from tests.conftest import TINY
from tests.live import chat_lines
from tests.reliability.inproc import add_batch, settings, status

POLL = 0.02


def test_an_idle_scheduler_backs_off_and_wakes_for_a_new_batch(tmp_path, backend, tiny_model) -> None:
    sched = Scheduler(settings(tmp_path, backend, tiny_model, poll_interval_s=POLL))
    ticks: list[tuple[float, bool]] = []
    tick = sched.tick

    def counted() -> bool:
        busy = tick()
        ticks.append((time.monotonic(), busy))
        return busy

    sched.tick = counted
    stop = threading.Event()
    runner = threading.Thread(target=sched.run, args=(stop,))
    runner.start()
    try:
        time.sleep(1.5)
        idle = [t for t, busy in ticks if not busy]
        assert len(idle) == len(ticks) > 3
        gaps = [b - a for a, b in zip(idle[3:], idle[4:])]     # after the back-off has grown
        assert min(gaps) >= POLL * IDLE_TICKS * 0.9, gaps        # not every poll interval ...
        assert len(ticks) < 1.5 / (POLL * IDLE_TICKS) + 5        # ... so far fewer ticks than 1.5 s / POLL

        bid = add_batch(sched.sessions, sched.store, chat_lines(3, TINY))
        added = time.monotonic()
        while status(sched.sessions, bid).status == "validating":
            assert time.monotonic() - added < 5, "the idle scheduler never took the new batch"
            time.sleep(0.01)
        assert time.monotonic() - added < POLL * IDLE_TICKS + 2.0      # one stretched wait, then validation
        while not any(busy for _, busy in ticks):                       # that tick (still running) says busy
            assert time.monotonic() - added < 10, "validating a batch did not count as work"
            time.sleep(0.01)
    finally:
        stop.set()
        runner.join(timeout=10)
