"""The scheduler role: validation, planning rounds and batch transitions, in one loop.

One scheduler is active per database: it holds the `scheduler` lease and
renews it whenever a third of it has passed; any other scheduler started
against the same database stands by and takes over once the lease lapses (a
crash) or is released (a clean stop). A tick lasts seconds (validation of a
200 MB file, a planning round of 50,000 requests), well inside the two
thirds of the lease left at its start. The scheduler holds no
state the database lacks, so it can be restarted, or replaced, at any time.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

from sqlalchemy import or_, update

from core.config import Settings
from core.db import make_engine, make_sessionmaker
from core.migrate import upgrade
from core.models import Lease
from core.served import model_paths
from core.storage import FileStore
from scheduler import intake, lifecycle, planning
from scheduler import retention
from scheduler.validation import ModelInfo

log = logging.getLogger("blendserve.scheduler")


def model_info(name: str, path) -> ModelInfo:
    from core.modelstore import context_length, load_tokenizer

    tok = load_tokenizer(path)
    return ModelInfo(
        name=name, context_length=context_length(path),
        render_chat=lambda messages: tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False),
        encode=lambda texts: tok(texts, add_special_tokens=False)["input_ids"],
        encode_prompt=lambda texts: tok(texts)["input_ids"],
    )


def policy_for(settings: Settings) -> planning.Policy:
    if settings.planner == "fcfs":
        return planning.FCFS()
    if settings.planner == "blendserve":
        from scheduler.blend import BlendServe

        return BlendServe(model_paths(settings), hardware=settings.hardware,
                          warmup_fraction=settings.warmup_fraction, urgent_horizon_s=settings.urgent_horizon_s)
    raise ValueError(f"unknown planner {settings.planner!r}; choose fcfs or blendserve")


class Scheduler:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        upgrade(settings.db_url)
        self.sessions = make_sessionmaker(make_engine(settings.db_url))
        self.store = FileStore(settings.files_dir)
        self.policy = policy_for(settings)
        self._models = {n: model_info(n, p) for n, p in model_paths(settings).items()}
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.leading: bool | None = None
        self.renew_at = 0.0

    def lead(self) -> bool:
        """Take or renew the scheduler lease; False while another live scheduler holds it.

        A held lease is renewed once a third of it has passed, not every tick:
        a write transaction 5 times a second would contend with the workers'.
        """
        now = time.time()
        if self.leading and now < self.renew_at:
            return True
        with self.sessions.begin() as s:
            won = s.execute(update(Lease).where(Lease.name == "scheduler",
                                                or_(Lease.holder == self.id, Lease.until < now))
                            .values(holder=self.id, until=now + self.settings.lease_seconds)).rowcount == 1
        if won != self.leading:
            log.info("scheduler %s %s", self.id, "leads" if won else "standing by: another scheduler leads")
        self.leading, self.renew_at = won, now + self.settings.lease_seconds / 3
        return won

    def release(self) -> None:
        with self.sessions.begin() as s:
            s.execute(update(Lease).where(Lease.name == "scheduler", Lease.holder == self.id).values(until=0.0))

    def models(self) -> dict[str, ModelInfo]:
        return self._models

    def tick(self) -> None:
        bid = intake.next_validating(self.sessions)
        if bid:
            intake.validate_batch(bid, self.sessions, self.store, self.settings, self.models)
        intake.tokenize_queued(self.sessions, self.store, self._models)
        planning.plan_round(self.sessions, self.settings, self.policy)
        lifecycle.settle(self.sessions, self.store)
        retention.sweep_if_due(self.sessions, self.store)

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or threading.Event()
        log.info("scheduler running (planner=%s)", self.settings.planner)
        try:
            while not stop.is_set():
                try:
                    if self.lead():
                        self.tick()
                except Exception:
                    log.exception("scheduler tick failed; retrying")
                    stop.wait(1.0)
                stop.wait(self.settings.poll_interval_s)
        finally:
            try:
                self.release()      # a standby takes over at once
            except Exception:
                log.warning("could not release the scheduler lease; a standby takes over when it lapses")
