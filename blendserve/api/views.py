"""What the dashboard draws of a batch, a worker and a planning round: plain rows the template reads."""
from __future__ import annotations

from dataclasses import dataclass

STALE_BEATS = 2                # heartbeats missed before a worker is marked stale
DRAWN = {"completed": "done", "cancelling": "cancelled", "cancelled": "cancelled", "expired": "expired",
         "failed": "failed"}


@dataclass
class BatchView:
    id: str
    status: str
    model: str | None
    done: int
    total: int
    tokens_per_s: float
    cached_share: float
    eta_s: float | None        # None: not running, or neither enough results nor an estimate yet
    eta_source: str | None = None   # "observed" | "estimate" | "overdue" (the estimate passed; too few results)
    phase: str | None = None   # in_progress only: "planning" | "waiting for a worker" | "warming up" | "running"
    reason: str | None = None  # failed, expired or cancelled: why, in words
    completed: int = 0
    failed: int = 0
    running_for_s: float | None = None   # since its first request reached an engine; None: none did yet
    in_engine: int | None = None         # warming up: its requests in chunks a worker holds
    no_worker: bool = False              # not run yet, and no live worker serves its model

    @property
    def ended_early(self) -> bool:
        """Cancelled or expired: its requests that never ran are counted failed, so its bar and count show
        what completed, not done / total (a batch cancelled before it ran is 0/40, not a full bar)."""
        return self.drawn in ("cancelled", "expired")

    @property
    def shown_done(self) -> int:
        return self.completed if self.ended_early else self.done

    @property
    def percent(self) -> float:
        return 100.0 * self.shown_done / self.total if self.total else 0.0

    @property
    def drawn(self) -> str:
        """How its bar is drawn: "done" (green) only for a completed batch; a cancelled, expired or failed one
        shows how far it got in its own colour; a running one before its first result has no bar."""
        return DRAWN.get(self.status, "running")


@dataclass
class WorkerView:
    id: str
    model: str
    engine: str
    kv_capacity_tokens: int
    heartbeat_age_s: float
    chunks: list[int]
    running_sequences: int | None = None    # None: the engine cannot say
    kv_used_tokens: int | None = None
    stale: bool = False        # no heartbeat for STALE_BEATS beats: its figures are old, it may have stopped

    @property
    def kv_percent(self) -> float | None:
        if self.kv_used_tokens is None or not self.kv_capacity_tokens:
            return None
        return 100.0 * self.kv_used_tokens / self.kv_capacity_tokens


@dataclass
class RoundView:
    model: str
    started_at: float
    duration_s: float
    requests: int
    est_seconds: float | None
    balance: float | None      # estimated compute seconds per memory second
