"""PostgreSQL's statistics of the job table, kept fresh as batches grow it."""
from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

# Re-analyze `requests` once a batch adds more than this fraction of the rows the statistics last saw
# (autovacuum's own default threshold for ANALYZE).
ANALYZE_GROWTH = 0.1


def refresh_statistics(sessions: sessionmaker[Session], added: int) -> bool:
    """ANALYZE `requests` on PostgreSQL when a batch just grew it by more than ANALYZE_GROWTH of what
    its statistics describe; True if it did.

    Why: the queries of tokenizing, planning and claiming pick their plans from those statistics. In a
    table that has never been analyzed (a fresh deployment) or that just took a million rows, the
    planner thinks `status = 'queued'` rare; the token-id update then read every queued row through the
    status index and hash-joined them to its 1,024 ids, 0.4-0.6 s a group at a million rows instead of
    ~20 ms by primary key: tokenizing, and with it the whole service, ran at ~1,600 requests/s. Autovacuum
    would analyze within about a minute where it is on (it is a server setting, sometimes off), and a
    million-request batch starts running within seconds. Sampling costs ~0.1-0.3 s at a million rows.
    """
    with sessions.begin() as s:
        if s.get_bind().dialect.name != "postgresql":
            return False
        seen = s.scalar(text("SELECT reltuples FROM pg_class WHERE oid = to_regclass('requests')"))
        if seen is not None and seen > 0 and added <= ANALYZE_GROWTH * seen:
            return False
        s.execute(text("ANALYZE requests"))
    return True
