"""The interactive lane's queue: requests wait here until the dynamic-batching rule lets them into the engine.

The rule (docs/design.md §7.1): a group of waiting requests starts when it
reaches N_max requests or when its oldest request has waited T_max, whichever
comes first. The engine polls `take` before every step, so a due group is
admitted at the very next step, ahead of all batch work. T_max = 0 admits each
request at the next step; a larger T_max trades a little latency for fewer,
fuller prefill steps.

Keys of interactive requests are negative, so they never collide with request
ids of batch work (positive) in the engine or in the worker's bookkeeping.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import deque

from blendserve.worker.engines.base import GenRequest


class Lane:
    def __init__(self, max_batch: int, max_wait_s: float, arrived: threading.Condition | None = None) -> None:
        """`arrived` is notified on every arrival: the worker passes the condition its idle loop waits
        on, so an idle worker wakes for an interactive request as it does for new batch work."""
        self.max_batch, self.max_wait_s = max(1, max_batch), max(0.0, max_wait_s)
        self._waiting: deque[tuple[float, GenRequest]] = deque()
        self._cancelled: set[int] = set()
        self.cancels = 0        # bumped when a request the engine may run is cancelled (the engine's cancel epoch)
        self._arrived = arrived or threading.Condition()     # its lock is re-entrant (an RLock)
        self._lock = self._arrived
        self._keys = itertools.count(-1, -1)

    def new_key(self) -> int:
        with self._lock:
            return next(self._keys)

    def put(self, request: GenRequest) -> None:
        with self._lock:
            self._waiting.append((time.monotonic(), request))
            self._arrived.notify_all()

    def take(self) -> list[GenRequest]:
        """The group the rule admits now (at most N_max requests); empty if none is due."""
        with self._lock:
            if not self._due(time.monotonic()):
                return []
            n = min(self.max_batch, len(self._waiting))
            return [self._waiting.popleft()[1] for _ in range(n)]

    def due_in(self) -> float | None:
        """Seconds until the waiting group is due (0.0: now); None when nothing waits."""
        with self._lock:
            if not self._waiting:
                return None
            if len(self._waiting) >= self.max_batch:
                return 0.0
            return max(0.0, self._waiting[0][0] + self.max_wait_s - time.monotonic())

    def cancel(self, key: int) -> None:
        """The caller went away: a request still waiting here is dropped now; one the engine runs is
        dropped at its next step (the engine asks `cancelled`, then the key is forgotten)."""
        with self._lock:
            kept = deque(w for w in self._waiting if w[1].key != key)
            if len(kept) == len(self._waiting):
                self._cancelled.add(key)
                self.cancels += 1
            self._waiting = kept

    def cancelled(self, key: int) -> bool:
        """True once for a cancelled request the engine runs (it drops it, so the key is forgotten)."""
        with self._lock:
            if key in self._cancelled:
                self._cancelled.discard(key)
                return True
            return False

    def waiting_keys(self) -> set[int]:
        """Keys of the requests still waiting here (not yet in the engine)."""
        with self._lock:
            return {w[1].key for w in self._waiting}

    def pending(self) -> int:
        with self._lock:
            return len(self._waiting)

    def _due(self, now: float) -> bool:
        return bool(self._waiting) and (len(self._waiting) >= self.max_batch
                                        or now - self._waiting[0][0] >= self.max_wait_s)


class Share:
    """The share of a worker's tokens (prompt + completion) that interactive requests took in the last
    `window_s` seconds. The worker pushes it with its heartbeat and the planner paces batch work to the
    rest of the engine's step budget, so a busy lane makes the plan's blend smaller, not late."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._events: deque[tuple[float, int, bool]] = deque()
        self._lock = threading.Lock()

    def add(self, tokens: int, interactive: bool) -> None:
        with self._lock:
            self._events.append((time.monotonic(), tokens, interactive))

    def value(self) -> float:
        with self._lock:
            cut = time.monotonic() - self.window_s
            while self._events and self._events[0][0] < cut:
                self._events.popleft()
            total = sum(t for _, t, _ in self._events)
            return sum(t for _, t, i in self._events if i) / total if total else 0.0
