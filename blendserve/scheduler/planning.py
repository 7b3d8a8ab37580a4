"""Planning rounds: order the unclaimed work of each model and cut it into chunks.

A round starts at once when a model has new work and no planned chunk left
(its engines would otherwise idle, and a batch's first result waits on it),
when its unplanned requests reach N_max, or when the policy asks for one (its
warm-up samples finished, or the set of live workers changed) (docs/design.md
§4.1). While a backlog is planned, new work waits for N_max or for the
backlog to drain: re-planning the backlog for work that trickles in (a big
file being tokenized) would cost a round per trickle. The exception is new
work of a better priority class than work already planned
(blendserve/scheduler/priority.py): it waits T_max to gather, then is
planned ahead of the backlog.

A round re-plans everything no worker has claimed: pending chunks are
dissolved, their requests join the new ones, and the policy orders the union
into pieces, one per data-parallel rank (or for any rank). Claimed chunks are
never touched.

Large backlogs are planned incrementally: once the unclaimed backlog plus the
new work exceeds BLENDSERVE_PLAN_WINDOW requests, a round leaves the planned
chunks as they are and plans only new work, at most a window of it, in plan
order after them (urgent and high work ahead of them). A 1,000,000-request
batch then gets its first chunks in seconds and the rest while they run, and
no round reads, orders or rewrites more than a window: re-planning the whole
backlog every round would cost O(backlog) per round, O(n^2) per batch. The
policy's global order holds within each window.

A round never holds a write transaction while it reads or plans: it reads a
snapshot (on SQLite through a read-only engine, a WAL snapshot that takes no
lock; on PostgreSQL plain reads, no FOR UPDATE), runs the policy outside any
transaction, then writes the result in one short transaction that deletes only
the chunks still pending and moves only requests whose state is still the one
read. A chunk a worker claimed meanwhile keeps its requests (they leave this
round's plan), so claims, results and heartbeats never wait for planning.
A model whose round raises is retried alone, with backoff.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from blendserve.core import bell
from blendserve.core.config import Settings
from blendserve.core.models import Batch, Chunk, Request, Worker
from blendserve.scheduler import priority, rounds
from blendserve.scheduler.backoff import Backoff
from blendserve.scheduler.chunks import write_chunks
from blendserve.scheduler.fencing import LostLease

log = logging.getLogger("blendserve.scheduler")


@dataclass
class Round:
    """Everything a policy may use to order one model's unclaimed requests."""
    model: str
    ids: np.ndarray               # request ids
    fresh: np.ndarray             # bool: never planned before (eligible for warm-up)
    batch_rank: np.ndarray        # FCFS key: position of the request's batch by creation
    line: np.ndarray
    expires_at: np.ndarray        # of the request's batch
    max_tokens: np.ndarray
    prompts: list[bytes] | None = None          # int32 token ids, when the policy needs them
    # Recently completed requests of the model (prompts, output tokens, max_tokens): the observed output lengths.
    history: tuple[list[bytes], np.ndarray, np.ndarray] | None = None
    # live (id, engine, kv tokens, hardware profile or None)
    workers: list[tuple[str, str, int, str | None]] = field(default_factory=list)

    def take(self, idx: np.ndarray) -> Round:
        """The same round over a subset of its requests (one priority class)."""
        return Round(self.model, self.ids[idx], self.fresh[idx], self.batch_rank[idx], self.line[idx],
                     self.expires_at[idx], self.max_tokens[idx],
                     [self.prompts[i] for i in idx] if self.prompts is not None else None,
                     self.history, self.workers)


@dataclass
class Piece:
    """Consecutive requests (indices into the Round) for one rank, or for any rank when rank is None."""
    order: np.ndarray
    rank: int | None = None


class Policy(Protocol):
    needs_prompts: bool

    def pieces(self, r: Round) -> list[Piece]:
        ...

    def wants_round(self, session: Session, model: str, live_workers: int) -> bool:
        """Whether to re-plan although no new work arrived."""
        ...


class FCFS:
    """File order, batch after batch: what vLLM's run_batch does; the baseline."""

    needs_prompts = False

    def pieces(self, r: Round) -> list[Piece]:
        return [Piece(np.lexsort((r.line, r.batch_rank)))]

    def wants_round(self, session: Session, model: str, live_workers: int) -> bool:
        return False


def live_workers(session: Session, model: str, lease_s: float,
                 now: float) -> list[tuple[str, str, int, str | None]]:
    """Workers of a model that heartbeated within a lease, in rank order (oldest first)."""
    return [tuple(w) for w in session.execute(
        select(Worker.id, Worker.engine, Worker.kv_capacity_tokens, Worker.hardware)
        .where(Worker.model == model, Worker.heartbeat_at >= now - lease_s)
        .order_by(Worker.started_at, Worker.id)).all()]


HISTORY = 4096


def _output_bound():
    """A request's output tokens at most: max_tokens for each of its `n` choices. The planner sees n choices as
    one request of n times the output (one prompt prefilled, n decodes), as completion_tokens counts them."""
    return Request.max_tokens * func.coalesce(Request.body["n"].as_integer(), 1)


def _history(session: Session, model: str) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """Completed requests of the model's most recent done chunks: the observed output lengths.

    Read through the chunks (newest first) and ix_requests_chunk: ordering the
    model's completed requests by finished_at sorted every completed request
    ever, each round (a million after one large batch).
    """
    recent = (select(Chunk.id).where(Chunk.model == model, Chunk.status == "done")
              .order_by(Chunk.id.desc()).limit(HISTORY))
    rows = session.execute(select(Request.prompt_ids, Request.completion_tokens, _output_bound())
                           .where(Request.chunk_id.in_(recent), Request.status == "completed")
                           .limit(HISTORY)).all()
    out = np.array([r[1] for r in rows], dtype=np.float64)
    return [r[0] for r in rows], out, np.array([r[2] or r[1] for r in rows], dtype=np.float64)


def _outranking_models(session: Session, settings: Settings, now: float) -> set[str]:
    """Models whose unplanned work has a better priority class than other running work of theirs.

    Such work must not wait behind a backlog of planned chunks (the usual
    T_max rule waits), or a high batch would queue behind a long low one. Read
    per batch, not per request: in-progress batches are few.
    """
    pending = set(session.scalars(select(Request.batch_id).where(Request.status == "pending").distinct()))
    batches = session.execute(select(Batch.id, Batch.model, Batch.metadata_, Batch.owner, Batch.expires_at)
                              .where(Batch.status == "in_progress")).all()
    cls = priority.classes([b.metadata_ for b in batches], [b.owner for b in batches],
                           np.array([b.expires_at for b in batches], dtype=np.float64), now,
                           settings.urgent_horizon_s, priority.key_classes(settings.key_priorities))
    best_new: dict[str, int] = {}
    worst: dict[str, int] = {}
    for b, c in zip(batches, cls.tolist()):
        worst[b.model] = max(worst.get(b.model, c), c)
        if b.id in pending:
            best_new[b.model] = min(best_new.get(b.model, c), c)
    return {m for m, c in best_new.items() if c < worst[m]}


def _due_models(session: Session, settings: Settings, policy: Policy, now: float) -> list[str]:
    rows = session.execute(
        select(Request.model, func.count(), func.min(Batch.in_progress_at)).join(Batch)
        .where(Request.status == "pending", Batch.status == "in_progress").group_by(Request.model)).all()
    planned = set(session.scalars(select(Chunk.model).where(Chunk.status == "pending").distinct()))
    outranks = _outranking_models(session, settings, now) if planned & {m for m, _, _ in rows} else set()
    due = {m for m, count, oldest in rows if count >= settings.plan_max_requests or m not in planned
           or (m in outranks and now - oldest >= settings.plan_max_wait_s)}
    due |= {m for m in planned
            if policy.wants_round(session, m, len(live_workers(session, m, settings.lease_seconds, now)))}
    return sorted(due)


def plan_round(sessions: sessionmaker[Session], settings: Settings, policy: Policy,
               readers: sessionmaker[Session] | None = None, backoff: Backoff | None = None) -> int:
    """Run a round for every model that is due; returns how many requests were (re)planned.

    readers: sessions for the snapshot (a read-only engine); default `sessions`.
    """
    readers = readers or sessions
    backoff = backoff or Backoff()
    now = time.time()
    with readers() as s:
        models = _due_models(s, settings, policy, now)
    n = 0
    for m in models:
        if not backoff.ready(("plan", m)):
            continue
        try:
            n += _plan_model(sessions, readers, settings, policy, m, now)
            backoff.succeeded(("plan", m))
        except LostLease:
            raise
        except Exception:
            log.exception("planning %s failed; retrying it alone", m)
            backoff.failed(("plan", m))
    return n


@dataclass
class _Snapshot:
    """What a round read of one model, in one snapshot."""
    rows: list
    unclaimed: list[int]           # pending chunks the round dissolves (none when incremental)
    front: int | None              # incremental: the first seq of the backlog left in place
    backlog: int                   # requests in pending chunks
    incremental: bool
    history: tuple | None
    workers: list


def _read(readers: sessionmaker[Session], settings: Settings, policy: Policy, model: str, now: float) -> _Snapshot:
    with readers() as s, s.begin():            # one snapshot for everything the round reads
        pending_chunks = s.execute(select(Chunk.id, Chunk.size, Chunk.seq)
                                   .where(Chunk.model == model, Chunk.status == "pending")).all()
        backlog = sum(c.size for c in pending_chunks)
        n_new = s.scalar(select(func.count()).select_from(
            select(Request.id).where(Request.model == model, Request.status == "pending")
            .limit(settings.plan_window + 1).subquery()))
        # Incremental: the unclaimed backlog stays as planned; only new work, a window at a time.
        incremental = backlog + n_new > settings.plan_window
        unclaimed = [] if incremental else [c.id for c in pending_chunks]
        front = min((c.seq for c in pending_chunks), default=None) if incremental else None
        cols = [Request.id, Request.status, Batch.created_at, Batch.id, Request.line, Batch.expires_at,
                _output_bound(), Request.chunk_id, Batch.metadata_, Batch.owner, Request.prompt_tokens] + (
                    [Request.prompt_ids] if policy.needs_prompts else [])
        todo = Request.status == "pending"
        if unclaimed:
            todo = todo | ((Request.status == "planned") & Request.chunk_id.in_(unclaimed))
        q = (select(*cols).join(Batch).where(Request.model == model, Batch.status == "in_progress", todo)
             .order_by(Batch.created_at, Batch.id, Request.line))
        rows = s.execute(q.limit(settings.plan_window) if incremental else q).all()
        history = _history(s, model) if policy.needs_prompts and rows else None
        return _Snapshot(rows, unclaimed, front, backlog, incremental, history,
                         live_workers(s, model, settings.lease_seconds, now))


def _round(snap: _Snapshot, policy: Policy, model: str) -> Round:
    rows = snap.rows
    batch_order = {b: i for i, b in enumerate(dict.fromkeys(r[3] for r in rows))}
    return Round(model=model, ids=np.array([r[0] for r in rows], dtype=np.int64),
                 fresh=np.array([r[1] == "pending" for r in rows]),
                 batch_rank=np.array([batch_order[r[3]] for r in rows]), line=np.array([r[4] for r in rows]),
                 expires_at=np.array([r[5] for r in rows], dtype=np.float64),
                 max_tokens=np.array([r[6] for r in rows], dtype=np.int64),
                 prompts=[r[11] for r in rows] if policy.needs_prompts else None,
                 history=snap.history, workers=snap.workers)


def _order(rnd: Round, snap: _Snapshot, settings: Settings, policy: Policy,
           now: float) -> tuple[list[Piece], list[bool]]:
    """The policy's pieces per priority class, urgent first, then high, normal, low; and for each piece whether
    it goes ahead of the backlog an incremental round leaves in place (urgent and high work)."""
    rows = snap.rows
    cls = priority.classes([r[8] for r in rows], [r[9] for r in rows], rnd.expires_at, now,
                           settings.urgent_horizon_s, priority.key_classes(settings.key_priorities))
    pieces, ahead = [], []
    for c in np.unique(cls):
        idx = np.flatnonzero(cls == c)
        sub = rnd if len(idx) == len(rows) else rnd.take(idx)
        got = [Piece(idx[p.order], p.rank) for p in policy.pieces(sub)]
        pieces += got
        ahead += [bool(snap.front is not None and c < priority.CLASS["normal"])] * len(got)
    assert sum(len(p.order) for p in pieces) == len(rows), "a policy must place every request exactly once"
    return pieces, ahead


def _plan_model(sessions: sessionmaker[Session], readers: sessionmaker[Session], settings: Settings,
                policy: Policy, model: str, now: float) -> int:
    snap = _read(readers, settings, policy, model, now)
    if not snap.rows:
        if snap.unclaimed:
            with sessions.begin() as s:
                s.execute(delete(Chunk).where(Chunk.id.in_(snap.unclaimed), Chunk.status == "pending"))
        return 0
    rows = snap.rows
    rnd = _round(snap, policy, model)
    t0 = time.time()
    rounds.take_estimate(policy, model)        # drop what a failed round may have left
    pieces, ahead = _order(rnd, snap, settings, policy, now)
    t_plan = time.time() - t0
    est = rounds.take_estimate(policy, model)
    with sessions.begin() as s:                # the short write: only what is still as it was read
        write_chunks(s, model, rnd.ids, [r[7] if r[1] == "planned" else None for r in rows], pieces, ahead,
                     rnd.max_tokens, np.array([r[10] or 0 for r in rows], dtype=np.int64), snap.unclaimed,
                     snap.front, settings, now)
        rounds.record(s, model, now, time.time() - now, len(rows), est)
    bell.ring(settings.data_dir, "chunks")     # idle workers claim now, not after their back-off
    log.info("planned %d request(s) of %s in %d piece(s)%s: policy %.2fs, round %.2fs; %s", len(rows), model,
             len(pieces), f", {snap.backlog} left planned" if snap.incremental else "", t_plan,
             time.time() - now, rounds.describe(est))
    return len(rows)
