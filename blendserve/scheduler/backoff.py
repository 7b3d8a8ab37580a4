"""Per-item retry delays: work that raised (one batch, one model) waits and retries alone.

The scheduler's loop must carry on for every other batch and model when one
raises, and must not retry the failing one five times a second; after
`limit` failures the caller gives up on it (fails the batch with an error).
"""
from __future__ import annotations

import time
from collections.abc import Hashable


class Backoff:
    def __init__(self, first_s: float = 1.0, max_s: float = 60.0, limit: int = 3) -> None:
        self.first_s, self.max_s, self.limit = first_s, max_s, limit
        self.state: dict[Hashable, tuple[int, float]] = {}     # key -> (failures, retry at)

    def ready(self, key: Hashable) -> bool:
        return self.state.get(key, (0, 0.0))[1] <= time.time()

    def waiting(self) -> set:
        now = time.time()
        return {k for k, (_, at) in self.state.items() if at > now}

    def failed(self, key: Hashable) -> bool:
        """Count a failure; True once the key failed `limit` times (then it is forgotten)."""
        n = self.state.get(key, (0, 0.0))[0] + 1
        if n >= self.limit:
            self.state.pop(key, None)
            return True
        self.state[key] = (n, time.time() + min(self.first_s * 2 ** (n - 1), self.max_s))
        return False

    def succeeded(self, key: Hashable) -> None:
        self.state.pop(key, None)
