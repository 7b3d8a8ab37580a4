"""The scheduler role: validation, planning rounds and batch transitions, in one loop.

One scheduler is active per database: it holds the `scheduler` lease and
renews it whenever a third of it has passed; any other scheduler started
against the same database stands by and takes over once the lease lapses (a
crash) or is released (a clean stop). A tick lasts seconds (validation of a
200 MB file, a planning round of 50,000 requests), well inside the two
thirds of the lease left at its start. The scheduler holds no
state the database lacks, so it can be restarted, or replaced, at any time.

Every write it makes is fenced (blendserve/scheduler/fencing.py): one that stalled past
its lease while another took over cannot act. Each batch and each model is
handled alone: one that raises is retried with backoff (blendserve/scheduler/backoff.py),
a batch that cannot be validated after a few tries fails with an error, and
the tick carries on for every other batch and model. Planning reads a
snapshot through a read-only engine (blendserve/scheduler/planning.py).
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

from sqlalchemy import or_, update

from blendserve.core.bell import Bell
from blendserve.core.config import Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Lease
from blendserve.core.served import model_paths
from blendserve.core.storage import FileStore
from blendserve.migrations.upgrade import upgrade
from blendserve.protocol.bodies import model_info
from blendserve.protocol.fields import ModelInfo
from blendserve.protocol.grammar_limits import with_grammar
from blendserve.scheduler import intake, lifecycle, outputs, planning, retention, webhooks
from blendserve.scheduler.backoff import Backoff
from blendserve.scheduler.fencing import FencedSessions, LostLease

log = logging.getLogger("blendserve.scheduler")

# Ticks that found nothing to do stretch the wait, doubling up to this many poll intervals (0.8 s by
# default): five idle ticks a second took ~9% of a core of SQL round trips beside a running batch, and
# on a CPU engine whose torch threads share those cores every bit of that stalls a whole step (a 5%
# background load slowed the engine 10%). A new batch or a finished one waits at most this much longer.
IDLE_TICKS = 4


def policy_for(settings: Settings) -> planning.Policy:
    if settings.planner == "fcfs":
        return planning.FCFS()
    if settings.planner in ("blendserve", "dfs"):
        from sqlalchemy import select

        from blendserve.core.models import Worker
        from blendserve.scheduler.blend import DFS, BlendServe

        readers = make_sessionmaker(make_engine(settings.db_url, readonly=True))

        def step_budgets(ids: list[str]) -> dict[str, int | None]:
            """The workers' step_tokens, read from their rows (the engine's budget per mixed step), less
            the share their interactive lane took in the last minute."""
            with readers() as s:
                rows = s.execute(select(Worker.id, Worker.step_tokens, Worker.interactive_share)
                                 .where(Worker.id.in_(ids))).all()
            return {w: None if step is None else max(1, int(step * (1.0 - min(share or 0.0, 0.9))))
                    for w, step, share in rows}

        cls = BlendServe if settings.planner == "blendserve" else DFS
        return cls(model_paths(settings), hardware=settings.hardware, warmup_fraction=settings.warmup_fraction,
                   urgent_horizon_s=settings.urgent_horizon_s, step_budgets=step_budgets)
    raise ValueError(f"unknown planner {settings.planner!r}; choose blendserve, dfs or fcfs")


class Scheduler:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        upgrade(settings.db_url, settings)
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        engine = make_engine(settings.db_url)
        self.lease_sessions = make_sessionmaker(engine)     # takes and releases the lease itself
        self.sessions = FencedSessions(engine, self.id, settings.lease_seconds)
        self.readers = make_sessionmaker(make_engine(settings.db_url, readonly=True))
        self.store = FileStore(settings.files_dir)
        self.policy = policy_for(settings)
        self._models = {n: with_grammar(model_info(n, p), settings.grammar, settings.limit)
                        for n, p in model_paths(settings).items()}
        self.leading: bool | None = None
        self.renew_at = 0.0
        self.backoff = Backoff()
        self.tokenized = intake.Progress()     # where tokenizing stands in each running batch
        self.bell = Bell(settings.data_dir, "batches")
        self.webhooks = webhooks.Deliverer(settings.webhook, self.sessions, self.readers, lambda: bool(self.leading))

    def lead(self) -> bool:
        """Take or renew the scheduler lease; False while another live scheduler holds it.

        A held lease is renewed once a third of it has passed, not every tick:
        a write transaction 5 times a second would contend with the workers'.
        """
        now = time.time()
        if self.leading and now < self.renew_at:
            return True
        with self.lease_sessions.begin() as s:
            won = s.execute(update(Lease).where(Lease.name == "scheduler",
                                                or_(Lease.holder == self.id, Lease.until < now))
                            .values(holder=self.id, until=now + self.settings.lease_seconds)).rowcount == 1
        if won != self.leading:
            log.info("scheduler %s %s (planner=%s)", self.id,      # a start's one line, and each change of leader
                     "leads" if won else "standing by: another scheduler leads", self.settings.planner)
        self.leading, self.renew_at = won, now + self.settings.lease_seconds / 3
        return won

    def release(self) -> None:
        with self.lease_sessions.begin() as s:
            s.execute(update(Lease).where(Lease.name == "scheduler", Lease.holder == self.id).values(until=0.0))

    def models(self) -> dict[str, ModelInfo]:
        return self._models

    def tick(self) -> bool:
        """One pass of every duty; True if any of them found work (the next tick then comes at once)."""
        busy = self._validate_next()
        busy = intake.tokenize_queued(self.sessions, self.store, self._models, progress=self.tokenized) > 0 or busy
        busy = planning.plan_round(self.sessions, self.settings, self.policy, readers=self.readers,
                                   backoff=self.backoff) > 0 or busy
        busy = lifecycle.settle(self.sessions, self.store, backoff=self.backoff, hooks=self.settings.webhook) > 0 \
            or busy
        outputs.number_finished(self.sessions)     # never busy: results flow all run long, polling must not spin
        retention.sweep_if_due(self.sessions, self.store)
        return busy

    def _validate_next(self) -> bool:
        """Validate the oldest batch not waiting to retry; one that keeps raising fails alone."""
        waiting = self.backoff.waiting()
        bid = intake.next_validating(self.sessions, skip={k[1] for k in waiting if k[0] == "validate"})
        if not bid:
            return False
        try:
            intake.validate_batch(bid, self.sessions, self.store, self.settings, self.models)
            self.backoff.succeeded(("validate", bid))
        except LostLease:
            raise
        except Exception as e:
            log.exception("validating batch %s failed", bid)
            if self.backoff.failed(("validate", bid)):
                intake.fail_batch(self.sessions, bid, f"The batch could not be validated: {type(e).__name__}: {e}",
                                  self.settings.webhook)
        return True

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or threading.Event()
        log.debug("scheduler running (planner=%s)", self.settings.planner)
        self.webhooks.start()       # its own thread: a slow receiver never delays a tick
        try:
            idle = 0
            while not stop.is_set():
                busy = False
                try:
                    busy = self.lead() and self.tick()
                except LostLease:
                    log.warning("scheduler %s lost its lease mid-tick; standing by", self.id)
                    self.leading = None
                except Exception:
                    log.exception("scheduler tick failed; retrying")
                    stop.wait(1.0)
                idle = 0 if busy else idle + 1
                # A batch created or cancelled rings the bell: it is validated now, not after the back-off.
                self.bell.wait(self.settings.poll_interval_s * min(2 ** max(idle - 1, 0), IDLE_TICKS), stop)
        finally:
            self.webhooks.stop()
            try:
                self.release()      # a standby takes over at once
            except Exception:
                log.warning("could not release the scheduler lease; a standby takes over when it lapses")
