"""The webhook queue: one row per batch event and endpoint, written with the batch's terminal status.

`queue` runs inside the transaction that moves a batch to completed, failed, expired or cancelled
(blendserve/scheduler/lifecycle.py, intake.py), so an event exists exactly when its status change
does: a crash before the commit leaves neither, one after it leaves both. The body is stored as sent,
so every retry carries the same bytes and the same `webhook-id` (the event's id), which a receiver
uses to drop duplicates. Delivery state (attempts, next_attempt_at, delivered_at, the last answer) is
in the row, so the scheduler that delivers (blendserve/scheduler/webhooks.py) can be restarted or
replaced at any time without losing or forgetting an event.
"""
from __future__ import annotations

import json
import time

from sqlalchemy import Float, Index, Integer, String, Text, UniqueConstraint, select
from sqlalchemy.engine import Row
from sqlalchemy.orm import Mapped, Session, mapped_column

from blendserve.core.ids import new_id
from blendserve.core.models import Base, Batch
from blendserve.core.webhook_settings import WebhookSettings

EVENTS = {"completed": "batch.completed", "failed": "batch.failed", "expired": "batch.expired",
          "cancelled": "batch.cancelled"}
RECENT = 20             # deliveries the dashboard lists


class Delivery(Base):
    """An event on its way to one endpoint. status: pending -> delivered, or failed (given up on)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (UniqueConstraint("event_id", "target", name="uq_webhook_deliveries_event_target"),
                      Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
                      Index("ix_webhook_deliveries_owner", "owner", "id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(String(64))      # evt_...: the webhook-id header, on every attempt
    event_type: Mapped[str] = mapped_column(String(32))
    batch_id: Mapped[str] = mapped_column(String(64))
    owner: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(80))         # "" the deployment endpoint, else the tenant owner
    payload: Mapped[str] = mapped_column(Text)
    created_at: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float] = mapped_column(Float)
    delivered_at: Mapped[float | None] = mapped_column(Float)
    last_status: Mapped[int | None] = mapped_column(Integer)   # the receiver's HTTP status
    last_error: Mapped[str | None] = mapped_column(String(300))


def queue(s: Session, hooks: WebhookSettings | None, batch_id: str, status: str) -> int:
    """Queue the event of a batch that just turned `status`, one row per endpoint; call it in the
    transaction that made the change, after it matched. Returns the rows queued."""
    if hooks is None or not hooks.enabled:
        return 0
    owner = s.scalar(select(Batch.owner).where(Batch.id == batch_id))
    targets = hooks.targets(owner or "")
    if not targets:
        return 0
    now = int(time.time())
    event_id, kind = new_id("evt_"), EVENTS[status]
    body = json.dumps({"id": event_id, "object": "event", "created_at": now, "type": kind,
                       "data": {"id": batch_id}}, separators=(",", ":"))
    s.add_all([Delivery(event_id=event_id, event_type=kind, batch_id=batch_id, owner=owner, target=t,
                        payload=body, created_at=now, status="pending", attempts=0, next_attempt_at=float(now))
               for t in targets])
    return len(targets)


def recent(s: Session, owner: str | None, limit: int = RECENT) -> list[Row]:
    """The latest deliveries of an owner's batches (all of them for None), newest first: the dashboard's log.
    The endpoint is named by kind ("deployment" or "tenant"), never by URL."""
    q = select(Delivery.event_type, Delivery.batch_id, Delivery.target, Delivery.status, Delivery.attempts,
               Delivery.created_at, Delivery.delivered_at, Delivery.last_status, Delivery.last_error
               ).order_by(Delivery.id.desc()).limit(limit)
    return list(s.execute(q if owner is None else q.where(Delivery.owner == owner)).all())
