"""A result write that fails is retried (or its chunk handed back), never leaked: the database refuses
every result for a while (a trigger), then accepts them again, and the batch finishes, every line once."""
from __future__ import annotations

import time

import sqlalchemy as sa

from blendserve.core.config import Settings
from tests.conftest import TINY
from tests.live import chat_lines, jsonl, read_lines, wait_batch

SQLITE_TRIGGER = """CREATE TRIGGER refuse_results BEFORE UPDATE ON requests
WHEN NEW.status = 'completed' AND (SELECT refuse FROM fault) = 1
BEGIN SELECT RAISE(ABORT, 'injected fault: results refused'); END"""
PG_FUNCTION = """CREATE FUNCTION refuse_results() RETURNS trigger AS $$
BEGIN
  IF NEW.status = 'completed' AND (SELECT refuse FROM fault) = 1 THEN
    RAISE EXCEPTION 'injected fault: results refused';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql"""
PG_TRIGGER = "CREATE TRIGGER refuse_results BEFORE UPDATE ON requests FOR EACH ROW EXECUTE FUNCTION refuse_results()"


def test_refused_result_writes_are_retried(make_deployment):
    d = make_deployment().start_all()
    url = d.env["BLENDSERVE_DATABASE_URL"] or Settings(data_dir=d.data_dir).db_url
    db = sa.create_engine(url)
    with db.begin() as c:
        c.execute(sa.text("CREATE TABLE fault (refuse INTEGER)"))
        c.execute(sa.text("INSERT INTO fault VALUES (1)"))
        if db.dialect.name == "sqlite":
            c.execute(sa.text(SQLITE_TRIGGER))
        else:
            c.execute(sa.text(PG_FUNCTION))
            c.execute(sa.text(PG_TRIGGER))
    c = d.client()
    rows = chat_lines(8, TINY, max_tokens=4)
    f = c.files.create(file=("w.jsonl", jsonl(rows)), purpose="batch")
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    deadline = time.time() + 60
    while "injected fault" not in d.log("worker", tail=None):
        assert time.time() < deadline, d.log("worker")
        time.sleep(0.2)
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE fault SET refuse = 0"))
    db.dispose()
    b = wait_batch(c, b.id, timeout=90)
    assert b.status == "completed" and b.error_file_id is None, b
    assert sorted(o["custom_id"] for o in read_lines(c, b.output_file_id)) == sorted(r["custom_id"] for r in rows)
