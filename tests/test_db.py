"""The SQLite engines: writers take the write lock up front, read-only engines never take it."""
import threading
import time

import pytest
import sqlalchemy as sa

from blendserve.core.db import make_engine


def test_readonly_reads_while_a_writer_holds_the_lock(tmp_path):
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    writer, reader = make_engine(url), make_engine(url, readonly=True)
    with writer.begin() as c:
        c.execute(sa.text("CREATE TABLE t (x INTEGER)"))
        c.execute(sa.text("INSERT INTO t VALUES (1)"))
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with writer.begin() as c:
            c.execute(sa.text("INSERT INTO t VALUES (2)"))
            held.set()
            release.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(5)
    t0 = time.time()
    with reader.begin() as c:
        assert c.execute(sa.text("SELECT count(*) FROM t")).scalar() == 1   # the committed snapshot
    assert time.time() - t0 < 1.0
    release.set()
    t.join()
    with pytest.raises(sa.exc.OperationalError):
        with reader.begin() as c:
            c.execute(sa.text("INSERT INTO t VALUES (3)"))


def test_a_postgresql_connection_killed_while_idle_is_replaced_unseen(monkeypatch):
    """The check before use that replaced pool_pre_ping: a backend killed while its connection sat in
    the pool (a server restart) is noticed at checkout and replaced; the caller sees no error."""
    from blendserve.core import db
    from tests.live import PG_ADMIN, pg_schema_url

    engine, admin = make_engine(pg_schema_url(), pool_size=1), sa.create_engine(PG_ADMIN)
    checks: list[bool] = []
    real = db.alive
    monkeypatch.setattr(db, "alive", lambda conn: checks.append(ok := real(conn)) or ok)
    with engine.connect() as c:
        pid = c.scalar(sa.text("SELECT pg_backend_pid()"))
    with engine.connect() as c:     # back at once: used without a check
        assert c.scalar(sa.text("SELECT pg_backend_pid()")) == pid
    assert checks == []
    with admin.begin() as c:
        c.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    monkeypatch.setattr(db, "PING_IDLE_S", 0.0)     # as if it had sat idle past the threshold
    with engine.connect() as c:
        assert c.scalar(sa.text("SELECT pg_backend_pid()")) != pid
    assert checks == [False]
    with engine.connect() as c:     # the fresh one passes its check
        c.scalar(sa.text("SELECT 1"))
    assert checks == [False, True]
    engine.dispose()
    admin.dispose()
