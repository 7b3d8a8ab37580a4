"""The SQLite engines: writers take the write lock up front, read-only engines never take it."""
import threading
import time

import pytest
import sqlalchemy as sa

from core.db import make_engine


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
