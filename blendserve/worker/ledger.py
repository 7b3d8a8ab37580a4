"""The chunks one rank holds: its claims, what each chunk still owes, and each chunk's release or give-back.

A chunk is claimed (the next one ahead, in the rank's claim thread, so the engine's loop does not wait for a
claim's transaction at every chunk boundary), its requests are admitted one by one (`run`), and it is
released once every admitted request has a result and all were admitted: `done`, or `pending` when some
still have to run (a stop, a lost batch; blendserve/worker/claims.py). The heartbeat renews every held
chunk's lease; one it cannot renew is lost and its work is dropped.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from blendserve.core.config import Settings
from blendserve.worker import claims
from blendserve.worker.ranks import WORK, Claims, LiveBatches

log = logging.getLogger("blendserve.worker")


@dataclass
class Held:
    """A claimed chunk: how many admitted requests still lack a result, and whether all were admitted."""
    outstanding: int = 0
    fed: bool = False
    lost: bool = False


class Ledger:
    """What one rank holds. `lock` guards the counts between the engine's thread and the writer's."""

    def __init__(self, sessions: sessionmaker[Session], worker_id: str, model: str, settings: Settings,
                 shared: tuple[LiveBatches, Claims], rank: int, stopping: Callable[[], bool]) -> None:
        self.sessions, self.worker_id, self.model, self.settings = sessions, worker_id, model, settings
        self.live, self.claims = shared
        self.stopping = stopping
        self.held: dict[int, Held] = {}
        self.meta: dict[int, tuple[int, str, str]] = {}   # request id -> (chunk id, batch id, endpoint)
        self.lock = threading.Lock()
        self.losses = 0             # claims lost, meta dropped: part of the engine's cancel epoch
        self.claimer = ThreadPoolExecutor(1, thread_name_prefix=f"claims{rank}")
        self.ahead: Future[claims.Claimed | None] | None = None

    # -- claims ----------------------------------------------------------------------------------------

    def claim(self) -> claims.Claimed | None:
        """Claim the next chunk and hold it (the heartbeat renews its lease from here on); None if none is
        ready. Runs in the rank's claim thread (ahead of need) or in the engine's (a stream's first)."""
        t0 = time.perf_counter()
        st = self.settings
        got = self.claims.claim(self.sessions, self.worker_id, self.model, st.lease_seconds, st.poll_interval_s)
        if got is None:
            return None
        with self.lock:
            self.held[got.id] = Held()
        with WORK:
            WORK.notify_all()
        log.info("claimed chunk %d (%d requests) in %.1f ms (sibling wait %.1f, transaction %.1f, "
                 "its CPU %.1f)", got.id, len(got.rows), (time.perf_counter() - t0) * 1e3, *self.claims.timing())
        self.live.watch({r.batch_id for r in got.rows})
        return got

    def claim_ahead(self) -> None:
        """Start claiming the next chunk in the claim thread, unless that is under way."""
        if self.ahead is None:
            self.ahead = self.claimer.submit(self.claim)

    def next_claim(self) -> claims.Claimed | None:
        """The chunk claimed ahead, if there is one; else (none was ready then either) a claim now."""
        ahead, self.ahead = self.ahead, None
        got = ahead.result() if ahead is not None else None
        if ahead is not None and got is None:       # planning (or the batch) had nothing ready in time
            log.info("the claim made ahead found no chunk ready")
        return got if got is not None else self.claim()

    def forget_ahead(self) -> None:
        """Wait for a claim made ahead to end; its chunk, if it got one, is held and is handed back with the
        others (give_back_all)."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            try:
                ahead.result()
            except Exception:
                log.exception("claiming a chunk ahead failed")

    # -- what a chunk owes -----------------------------------------------------------------------------

    def owe(self, cid: int) -> None:
        """One more admitted request of the chunk lacks a result."""
        with self.lock:
            self.held[cid].outstanding += 1

    def run(self, key: int, cid: int, batch_id: str, endpoint: str) -> None:
        """The request goes to the engine: its result is written against its chunk."""
        self.meta[key] = (cid, batch_id, endpoint)

    def fed(self, cid: int) -> None:
        """Every request of the chunk was admitted (or skipped)."""
        with self.lock:
            self.held[cid].fed = True
            self._maybe_release(cid)

    def settled(self, cid: int) -> None:
        """A result of the chunk was written (or given up on): release the chunk once it has them all."""
        with self.lock:
            if cid in self.held:
                self.held[cid].outstanding -= 1
                self._maybe_release(cid)

    def drop(self, key: int) -> None:
        """The engine dropped the request without a result (cancelled, lost, stopping): settled here, once."""
        cid, _, _ = self.meta.pop(key)
        self.settled(cid)

    def lost(self, cid: int) -> bool:
        held = self.held.get(cid)
        return held is None or held.lost

    # -- release and give-back -------------------------------------------------------------------------

    def _maybe_release(self, cid: int) -> None:
        """Release a chunk once it is fully fed and every admitted request settled (caller holds the lock)."""
        held = self.held.get(cid)
        if held is not None and held.fed and held.outstanding <= 0:
            self._give_back(cid, undo_claim=self.stopping())

    def _give_back(self, cid: int, undo_claim: bool = True) -> None:
        """Drop the chunk; the database says done or pending (caller holds the lock)."""
        held = self.held.pop(cid)
        if held.lost:
            return
        try:
            claims.release(self.sessions, cid, self.worker_id, undo_claim=undo_claim)
        except Exception:
            log.exception("could not release chunk %d; it runs again once its lease lapses", cid)

    def give_back_all(self) -> None:
        """Every held chunk goes back to `pending`, its claim not counted; every admitted request is forgotten."""
        self.forget_ahead()
        with self.lock:
            for cid in list(self.held):
                self._give_back(cid)
            self.meta.clear()
            self.losses += 1

    def renew(self) -> None:
        """Renew every held chunk's lease (the heartbeat), in one statement; a chunk that cannot be renewed is
        lost."""
        ids = [cid for cid, held in list(self.held.items()) if not held.lost]
        kept = claims.renew(self.sessions, ids, self.worker_id, self.settings.lease_seconds)
        for cid in ids:
            if cid not in kept and (held := self.held.get(cid)) is not None:
                log.warning("lost the lease on chunk %d; dropping its unfinished work", cid)
                held.lost = True
                with self.lock:         # after the flag: an engine that sees the new epoch sees it
                    self.losses += 1

    def close(self) -> None:
        self.claimer.shutdown()
