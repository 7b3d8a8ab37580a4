"""Per-batch request counters (blendserve.core.models.BatchCount): added to where requests finish, summed on read.

Every transition of a request into a final state goes through `add` in the
same transaction, counting only the rows that transaction actually moved (the
status guard of each write decides; a row finished twice is counted once).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from functools import cache

import orjson
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from blendserve.core.models import BatchCount

FIELDS = ("completed", "failed", "prompt_tokens", "cached_tokens", "completion_tokens")


def add(session: Session, writer: str, finished: Iterable[tuple[str, str, int, int, int]]) -> None:
    """Count finished requests: (batch id, final status, prompt, cached, completion tokens) each."""
    add_by_writer(session, {writer: finished})


def add_by_writer(session: Session, finished: dict[str, Iterable[tuple[str, str, int, int, int]]]) -> None:
    """`add` for several writers in one statement (a worker process writes the results of all its ranks
    together: one upsert per rank per transaction was a round trip each)."""
    rows = []
    for writer, items in finished.items():
        sums: dict[str, list[int]] = defaultdict(lambda: [0] * len(FIELDS))
        for batch_id, status, prompt, cached, completion in items:
            v = sums[batch_id]
            if status == "completed":
                v[0] += 1
                v[2] += prompt or 0
                v[3] += cached or 0
                v[4] += completion or 0
            else:
                v[1] += 1
        rows += [{"batch_id": b, "writer": writer, **dict(zip(FIELDS, v))} for b, v in sums.items()]
    if not rows:
        return
    rows.sort(key=lambda r: (r["batch_id"], r["writer"]))     # one lock order for every writer
    if session.get_bind().dialect.name == "postgresql":
        session.execute(_UPSERT_PG, {"rows": orjson.dumps(rows).decode()})
    else:
        session.connection().execute(_upsert_sqlite(), rows)


# PostgreSQL: every row in one statement over one JSON document (json_to_recordset yields the rows in the
# document's order, so the lock order above holds). Building the ON CONFLICT statement per call, and
# psycopg's pipelined executemany of its rows, were a quarter of a worker's result-writer CPU.
_UPSERT_PG = text(f"""
INSERT INTO batch_counts AS c (batch_id, writer, {", ".join(FIELDS)})
SELECT batch_id, writer, {", ".join(FIELDS)}
FROM json_to_recordset(CAST(:rows AS json))
     AS v(batch_id text, writer text, {", ".join(f"{f} bigint" for f in FIELDS)})
ON CONFLICT (batch_id, writer) DO UPDATE SET {", ".join(f"{f} = c.{f} + excluded.{f}" for f in FIELDS)}""")


@cache
def _upsert_sqlite():
    """The SQLite upsert, built once (its expression and cache key are not rebuilt per call)."""
    from sqlalchemy.dialects.sqlite import insert

    table = BatchCount.__table__
    stmt = insert(table)
    return stmt.on_conflict_do_update(index_elements=["batch_id", "writer"],
                                      set_={f: table.c[f] + stmt.excluded[f] for f in FIELDS})


def totals(batch_ids: list[str]):
    """(batch id, completed, failed, prompt, cached, completion tokens) per batch that has counts."""
    return (select(BatchCount.batch_id, *(func.sum(getattr(BatchCount, f)) for f in FIELDS))
            .where(BatchCount.batch_id.in_(batch_ids)).group_by(BatchCount.batch_id))
