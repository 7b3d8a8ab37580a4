"""/metrics is read from counter rows, never from the requests themselves: every statement a scrape runs is
captured, and none aggregates the requests table (the one probe left is an EXISTS per running batch); the
figures match what the counter rows say."""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import event

from blendserve.api.metrics import JobTableCollector
from blendserve.core.config import Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import Batch, BatchCount, Request, Worker
from blendserve.migrations.upgrade import upgrade


def test_a_scrape_reads_counters_not_requests(tmp_path):
    settings = Settings(data_dir=tmp_path)
    upgrade(settings.db_url)
    writer = make_sessionmaker(make_engine(settings.db_url))
    now = time.time()
    with writer.begin() as s:
        for bid, status, model, total in (("batch_a", "completed", "m1", 10), ("batch_b", "in_progress", "m1", 8),
                                          ("batch_c", "validating", None, 0)):
            s.add(Batch(id=bid, owner="o", endpoint="/v1/chat/completions", model=model, input_file_id="f",
                        completion_window="24h", status=status, created_at=int(now), in_progress_at=int(now) - 5,
                        expires_at=int(now) + 60, total=total))
        s.flush()
        s.add_all([BatchCount(batch_id="batch_a", writer="worker_1", completed=9, failed=1, prompt_tokens=90,
                              cached_tokens=30, completion_tokens=45),
                   BatchCount(batch_id="batch_b", writer="worker_1", completed=2, failed=0, prompt_tokens=20,
                              cached_tokens=0, completion_tokens=10),
                   BatchCount(batch_id="batch_b", writer="worker_2", completed=1, failed=1, prompt_tokens=10,
                              cached_tokens=0, completion_tokens=5)])
        s.add_all([Worker(id=w, model="m1", engine="cpu", kv_capacity_tokens=1000, host="h", pid=1, started_at=now,
                          heartbeat_at=now) for w in ("worker_1", "worker_2")])
        s.add(Request(batch_id="batch_b", line=0, custom_id="x", model="m1", body={}, status="pending"))
    engine = make_engine(settings.db_url, readonly=True)
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2].lower()))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobTableCollector(make_sessionmaker(engine), 30.0))
    text = generate_latest(registry).decode()
    on_requests = [q for q in statements if "from requests" in q]
    assert len(on_requests) == 1 and "exists" in on_requests[0], on_requests
    assert not [q for q in statements if "requests." in q and "exists" not in q]
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert got[("blendserve_requests", (("model", "m1"), ("status", "completed")))] == 12
    assert got[("blendserve_requests", (("model", "m1"), ("status", "failed")))] == 2
    assert got[("blendserve_requests", (("model", "m1"), ("status", "unfinished")))] == 8 - 4
    assert got[("blendserve_prompt_tokens_total", ())] == 120 and got[("blendserve_cached_tokens_total", ())] == 30
    assert got[("blendserve_completion_tokens_total", ())] == 60
    w1 = [v for (n, labels), v in got.items()
          if n == "blendserve_worker_tokens_total" and ("worker", "worker_1") in labels]
    assert w1 == [90 + 45 + 20 + 10]
    assert got[("blendserve_oldest_unplanned_age_seconds", ())] >= 5
