"""A round's plan written as chunks: the plan order cut into the unit a worker claims, and the requests moved
into them, in one short transaction that touches only what is still as the round read it."""
from __future__ import annotations

import numpy as np
from sqlalchemy import and_, bindparam, delete, func, insert, or_, select, text, update
from sqlalchemy.orm import Session

from blendserve.core.config import Settings
from blendserve.core.models import Chunk, Request

_MOVE = (update(Request)
         .where(Request.id == bindparam("b_id"),
                or_(Request.status == "pending",
                    and_(Request.status == "planned", Request.chunk_id == bindparam("b_old"))))
         .values(chunk_id=bindparam("b_chunk"), position=bindparam("b_pos"), status="planned"))
# PostgreSQL: the same in one statement, the round's rows as arrays. A pipeline of one UPDATE per row
# took most of a round: ~0.8 s for 8,000 requests, a third of the scheduler's tick while a million-request
# batch ran, which held the rate below what 64 ranks asked for.
_MOVE_PG = text("""
UPDATE requests AS r SET chunk_id = v.chunk, position = v.pos, status = 'planned'
FROM unnest(CAST(:ids AS bigint[]), CAST(:olds AS integer[]), CAST(:chunks AS integer[]), CAST(:pos AS integer[]))
     AS v(id, old, chunk, pos)
WHERE r.id = v.id AND (r.status = 'pending' OR (r.status = 'planned' AND r.chunk_id = v.old))""")


def _move(s: Session, moves: list[dict]) -> None:
    """Put each request into its new chunk at its position; a request no longer pending, or planned in
    a chunk other than the one this round read (claimed meanwhile), is left alone."""
    if s.get_bind().dialect.name == "postgresql":
        s.execute(_MOVE_PG, {k: [m[c] for m in moves] for k, c in
                             (("ids", "b_id"), ("olds", "b_old"), ("chunks", "b_chunk"), ("pos", "b_pos"))})
    else:
        s.connection().execute(_MOVE, moves)


def cut_chunks(order: np.ndarray, max_tokens: np.ndarray, prompt_tokens: np.ndarray,
               settings: Settings) -> list[list[int]]:
    """A piece's plan order cut into chunks, the unit a worker claims, leases and releases.

    A chunk holds `chunk_requests` requests. Requests that decode nothing
    (embeddings) are cut by their prompt tokens instead, `chunk_prefill_tokens`
    a chunk (at least one request): 32 embedding lines are a few hundred
    tokens, a sliver of one engine step, and an engine that took a step's worth
    of them would wait for a claim's transaction twenty times a step.
    """
    if not len(order):
        return []
    if max_tokens[order].any():
        size = settings.chunk_requests
        return [order[i:i + size].tolist() for i in range(0, len(order), size)]
    ends = np.cumsum(prompt_tokens[order])
    starts = np.unique(np.searchsorted(ends, np.arange(settings.chunk_prefill_tokens, int(ends[-1]),
                                                         settings.chunk_prefill_tokens), side="left") + 1)
    return [part.tolist() for part in np.split(order, starts[starts < len(order)]) if len(part)]


def write_chunks(s: Session, model: str, ids: np.ndarray, old_chunk: list[int | None], pieces: list, ahead: list[bool],
                 max_tokens: np.ndarray, prompt_tokens: np.ndarray, unclaimed: list[int], front: int | None,
                 settings: Settings, now: float) -> None:
    """Dissolve the unclaimed chunks no worker took meanwhile, cut each piece (requests still as read) into
    chunks and move the requests into them. Plan order: after every chunk planned so far; urgent and high
    work of an incremental round (`ahead`) goes before the backlog it leaves in place (seq below `front`)."""
    still = set(s.scalars(select(Chunk.id).where(Chunk.id.in_(unclaimed), Chunk.status == "pending"))) \
        if unclaimed else set()
    if still:
        s.execute(delete(Chunk).where(Chunk.id.in_(still)))
    keep = [old is None or old in still for old in old_chunk]
    chunks, parts = [], []
    for piece, first in zip(pieces, ahead):
        order = np.array([i for i in piece.order if keep[i]], dtype=np.int64)
        for part in cut_chunks(order, max_tokens, prompt_tokens, settings):
            chunks.append({"model": model, "rank": piece.rank, "status": "pending", "ahead": first,
                           "size": len(part), "attempts": 0, "created_at": now})
            parts.append(part)
    n_ahead = sum(c["ahead"] for c in chunks)
    after = (s.scalar(select(func.max(Chunk.seq))) or 0) + 1
    before = (front if front is not None else after) - n_ahead
    for c in chunks:
        if c.pop("ahead"):
            c["seq"], before = before, before + 1
        else:
            c["seq"], after = after, after + 1
    if chunks:
        new_ids = s.scalars(insert(Chunk).returning(Chunk.id, sort_by_parameter_order=True), chunks).all()
        _move(s, [{"b_id": int(ids[i]), "b_old": old_chunk[i], "b_chunk": new_ids[k], "b_pos": pos}
                  for k, part in enumerate(parts) for pos, i in enumerate(part)])
