"""Webhook delivery: the leading scheduler sends queued batch events, signed, at least once.

A thread of its own, beside the scheduler's loop, so a slow or dead receiver never delays validation,
planning or finalization. Each pass claims up to `concurrency` due rows (a fenced write that moves their
next attempt past the send's timeout, so no other scheduler sends them meanwhile), posts them at once
with short timeouts, and records each answer: a 2xx delivers it; anything else waits
retry_first_s * 2^(attempts - 1), at most retry_max_s (a receiver that comes back gets its events within
that), until retry_for_s after the event, when it is given up on. A scheduler that dies mid-send leaves
its claims to lapse, and the leader after it sends them again: a receiver may see an event twice
(at least once), always with the same `webhook-id`.

Signing follows the Standard Webhooks spec, as OpenAI's does: `webhook-id` (the event id),
`webhook-timestamp` (the attempt's time: receivers refuse old ones, so it is signed afresh per attempt)
and `webhook-signature` (`v1,` base64 HMAC-SHA256 of `id.timestamp.body` under the endpoint's secret).
"""
from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import httpx
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, sessionmaker
from standardwebhooks import Webhook

from blendserve.core.deliveries import Delivery
from blendserve.core.webhook_settings import WebhookSettings
from blendserve.scheduler.fencing import LostLease

log = logging.getLogger("blendserve.scheduler")

POLL_S = 1.0            # how often an idle deliverer looks for due events (one indexed read)
CLAIM_SLACK_S = 5.0     # a claim lasts two timeouts and this: then a dead sender's events are due again
KEEP_S = 7 * 86400      # delivered and given-up rows are kept this long for the dashboard's log
PRUNE_EVERY_S = 3600.0
USER_AGENT = "BlendServe-Webhooks/1"


def signed_headers(event_id: str, payload: str, secret: str, at: int | None = None) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt."""
    at = int(time.time()) if at is None else at
    signature = Webhook(secret).sign(event_id, datetime.fromtimestamp(at, timezone.utc), payload)
    return {"webhook-id": event_id, "webhook-timestamp": str(at), "webhook-signature": signature,
            "content-type": "application/json", "user-agent": USER_AGENT}


class Deliverer:
    """Sends the queue's due events while `leading()` says this scheduler leads."""

    def __init__(self, hooks: WebhookSettings, sessions: sessionmaker[Session], readers: sessionmaker[Session],
                 leading: Callable[[], bool]) -> None:
        self.hooks, self.sessions, self.readers, self.leading = hooks, sessions, readers, leading
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pruned = 0.0

    def start(self) -> None:
        """Run in a thread of its own, if any endpoint is configured."""
        if self.hooks.enabled:
            self._thread = threading.Thread(target=self.run, name="webhooks", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop after the sends in flight (each bounded by timeout_s); unsent events stay queued."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.hooks.timeout_s + 5)

    def run(self) -> None:
        with httpx.Client(timeout=self.hooks.timeout_s) as client, \
                ThreadPoolExecutor(self.hooks.concurrency, thread_name_prefix="webhook") as pool:
            while not self._stop.is_set():
                sent = 0
                try:
                    if self.leading():
                        sent = self.deliver_due(client, pool)
                        self._prune_if_due()
                except LostLease:
                    pass                # the next leader's deliverer sends them
                except Exception:
                    log.exception("webhook delivery pass failed; retrying")
                self._stop.wait(0 if sent else POLL_S)

    def deliver_due(self, client: httpx.Client, pool: ThreadPoolExecutor) -> int:
        """One pass: claim the due events (a few), send them together, record each answer. Returns how many."""
        rows = self._claim()
        if rows:
            answers = list(pool.map(lambda r: self._send(client, r), rows))
            self._record(list(zip(rows, answers)))
        return len(rows)

    def _claim(self) -> list[Delivery]:
        now = time.time()
        with self.readers() as s:       # idle passes read only: no write lock, no lease renewal
            if s.scalar(select(Delivery.id).where(Delivery.status == "pending", Delivery.next_attempt_at <= now)
                        .limit(1)) is None:
                return []
        with self.sessions.begin() as s:
            rows = s.scalars(select(Delivery).where(Delivery.status == "pending", Delivery.next_attempt_at <= now)
                             .order_by(Delivery.next_attempt_at).limit(self.hooks.concurrency)
                             .with_for_update(skip_locked=True)).all()
            hold = now + 2 * self.hooks.timeout_s + CLAIM_SLACK_S
            for r in rows:
                r.attempts, r.next_attempt_at = r.attempts + 1, hold
            s.flush()
            s.expunge_all()
        return list(rows)

    def _send(self, client: httpx.Client, row: Delivery) -> tuple[int | None, str | None]:
        """(HTTP status, error): error None means delivered."""
        endpoint = self.hooks.endpoint(row.target)
        if endpoint is None:
            return None, "its endpoint is no longer configured"
        url, secret = endpoint
        try:
            answer = client.post(url, content=row.payload.encode(),
                                 headers=signed_headers(row.event_id, row.payload, secret))
        except httpx.HTTPError as e:
            return None, f"{type(e).__name__}: {e}"[:300]
        return answer.status_code, None if 200 <= answer.status_code < 300 else f"HTTP {answer.status_code}"

    def wait_after(self, attempts: int) -> float:
        """The back-off after the attempts so far: doubling, capped, jittered down (never past the cap)."""
        return min(self.hooks.retry_first_s * 2 ** max(attempts - 1, 0), self.hooks.retry_max_s) \
            * random.uniform(0.8, 1.0)

    def _record(self, answers: list[tuple[Delivery, tuple[int | None, str | None]]]) -> None:
        now = time.time()
        with self.sessions.begin() as s:
            for row, (code, error) in answers:
                if error is None:
                    values = {"status": "delivered", "delivered_at": now}    # last_error: what it overcame
                elif now - row.created_at >= self.hooks.retry_for_s or self.hooks.endpoint(row.target) is None:
                    values = {"status": "failed", "last_error": error}
                    log.warning("webhook %s (%s of %s): given up after %d attempts: %s", row.event_id,
                                row.event_type, row.batch_id, row.attempts, error)
                else:
                    values = {"next_attempt_at": now + self.wait_after(row.attempts), "last_error": error}
                    (log.warning if row.attempts == 1 else log.debug)(
                        "webhook %s (%s of %s): attempt %d failed: %s; retrying", row.event_id, row.event_type,
                        row.batch_id, row.attempts, error)
                s.execute(update(Delivery).where(Delivery.id == row.id, Delivery.status == "pending")
                          .values(last_status=code, **values))

    def _prune_if_due(self) -> None:
        if time.time() - self._pruned < PRUNE_EVERY_S:
            return
        self._pruned = time.time()
        with self.sessions.begin() as s:
            s.execute(delete(Delivery).where(Delivery.status != "pending",
                                             Delivery.created_at < self._pruned - KEEP_S))
