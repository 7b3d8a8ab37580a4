"""Database engine and sessions for SQLite (embedded) and PostgreSQL (scale-out).

SQLite runs in WAL mode and every transaction starts with BEGIN IMMEDIATE: the
three roles are separate processes, and a deferred transaction that reads and
then writes fails at once (SQLITE_BUSY) when another process wrote in between,
whatever the busy timeout. Taking the write lock up front turns that into a wait.

Readers that never write (status polls, downloads, the planner's snapshot) use
an engine made with ``readonly=True``: a deferred BEGIN reads a WAL snapshot
and never waits for, or holds, the write lock, so polling cannot starve the
workers' result writes. ``PRAGMA query_only`` makes a stray write fail loudly.
On PostgreSQL readers never block writers anyway; the flag only marks intent.

PostgreSQL connections are checked before use only when they sat in the pool
for PING_IDLE_S or longer (a restarted server or a killed backend leaves idle
connections dead): SQLAlchemy's pool_pre_ping checked every checkout, a round
trip each, which at cluster rates was a worker's and the scheduler's most
frequent statement. A connection that fails its check is replaced, unseen by
the caller; one that dies while in use fails its transaction, as it would
have anyway, and the pool drops its siblings.
"""
from __future__ import annotations

import time
from functools import lru_cache

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.orm import Session, sessionmaker


def make_engine(url: str, *, readonly: bool = False, pool_size: int = 10) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, _record) -> None:
            dbapi_conn.isolation_level = None      # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=60000")
            if readonly:
                cur.execute("PRAGMA query_only=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn) -> None:
            conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")

        return engine
    engine = create_engine(url, pool_size=pool_size, max_overflow=2 * pool_size)

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_conn, record) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn, record, _proxy) -> None:
        since = record.info.pop("idle_since", None)
        if since is not None and time.monotonic() - since >= PING_IDLE_S and not alive(dbapi_conn):
            raise exc.DisconnectionError()      # the pool replaces it and checks out again

    return engine


PING_IDLE_S = 2.0       # a PostgreSQL connection idle in the pool this long is checked before use


def alive(dbapi_conn) -> bool:
    """One round trip; the connection is left outside any transaction."""
    try:
        with dbapi_conn.cursor() as cur:
            cur.execute("SELECT 1")
        dbapi_conn.rollback()
        return True
    except Exception:
        return False


@lru_cache
def shared_engine(url: str, pool_size: int = 10) -> Engine:
    """One engine per process and URL, for roles that run several services in one process.

    A worker process with 16 echo ranks would otherwise open 16 pools of up to
    30 connections each, and 64 ranks exhaust PostgreSQL's default 100
    connections; one pool lets the ranks share a bounded number.
    """
    return make_engine(url, pool_size=pool_size)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
