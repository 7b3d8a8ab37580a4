"""Where the interactive lane goes: the live workers' endpoints per model, one connection pool to them of
BLENDSERVE_LIMIT_POOL_SIZE connections, each tenant's share of it (blendserve/api/interactive_caps.py), and the
rules a body passes before it goes (blendserve/api/body_rules.py)."""
from __future__ import annotations

import itertools
import time
from pathlib import Path

import httpx
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from blendserve.api.body_rules import BodyRules
from blendserve.api.interactive_caps import Shares
from blendserve.core.config import WORKER_SECRET_HEADER
from blendserve.core.grammar_settings import GrammarSettings
from blendserve.core.limit_settings import LimitSettings
from blendserve.core.models import Worker

TTL_S = 1.0          # how long the list of live workers is reused between requests


class Lanes:
    """Live interactive endpoints per model, re-read from the job table at most once a second; round-robin."""

    def __init__(self, read_sessions: sessionmaker[Session], lease_s: float, secret: str, limits: LimitSettings,
                 keyed: bool, checkpoints: dict[str, Path], grammar: GrammarSettings) -> None:
        self.read_sessions, self.lease_s = read_sessions, lease_s
        self.limits = limits
        self.shares = Shares(self.limits, keyed)          # per tenant, below the pool's size
        self.checkpoints = checkpoints                    # model -> its checkpoint dir (its context length)
        self.rules = BodyRules(checkpoints, grammar, limits)   # a worker's rules, read first
        self.secret = secret          # BLENDSERVE_WORKER_SECRET: the workers answer the API only
        self.urls: dict[str, list[str]] = {}
        self.read_at = -TTL_S
        self.turn = itertools.count()
        self.client: httpx.AsyncClient | None = None

    async def for_model(self, model: str) -> list[str]:
        """Every live endpoint of the model, the next one in turn first."""
        if time.monotonic() - self.read_at > TTL_S:
            self.urls = await run_in_threadpool(self._read)
            self.read_at = time.monotonic()
        urls = self.urls.get(model, [])
        if not urls:
            return []
        k = next(self.turn) % len(urls)
        return urls[k:] + urls[:k]

    def forget(self) -> None:
        """A worker could not be reached: re-read the list before the next request."""
        self.read_at = -TTL_S

    def http(self) -> httpx.AsyncClient:
        if self.client is None:
            # No read timeout: a long generation may take minutes between bytes on a loaded CPU.
            size = self.limits.pool_size
            self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=2.0),
                                            limits=httpx.Limits(max_connections=size,
                                                                max_keepalive_connections=size),
                                            headers={WORKER_SECRET_HEADER: self.secret} if self.secret else None)
        return self.client

    def _read(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        with self.read_sessions() as s:
            for model, url in s.execute(select(Worker.model, Worker.interactive_url).where(
                    Worker.heartbeat_at > time.time() - self.lease_s, Worker.interactive_url.is_not(None))):
                out.setdefault(model, []).append(url)
        return out
