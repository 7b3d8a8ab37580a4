"""/metrics scrape time against the size of the requests table (PostgreSQL): 10K and 1M request rows.

A scrape reads counter rows (per batch and writer, per worker, per model), never the requests themselves, so
its time should not grow with the table. The rows are written straight into a fresh schema: 40 batches (a
few still running) with their requests, one batch_counts row per batch and writer (4 workers), 4 workers and
a planning round per model. Each size is scraped `--scrapes` times through the API's own collector on a
read-only engine (what GET /metrics runs, less HTTP); beside it, two aggregates over `requests` (the
alternative to counters), to show what grows.

    PYTHONPATH=. .venv/bin/python benchmarks/metrics_scrape.py --db postgresql+psycopg://postgres@127.0.0.1:5432/test
"""
from __future__ import annotations

import argparse
import secrets
import statistics
import time

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest

from blendserve.api.metrics import JobTableCollector
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.migrations.upgrade import upgrade

BATCHES, WORKERS = 40, 4


def fill(url: str, n: int) -> None:
    now = time.time()
    with sa.create_engine(url).begin() as c:
        for i in range(BATCHES):
            status = "in_progress" if i < 4 else "completed"
            c.execute(sa.text(
                "INSERT INTO batches (id, owner, endpoint, model, input_file_id, completion_window, status, "
                "created_at, in_progress_at, expires_at, total) VALUES (:id, 'o', '/v1/chat/completions', 'm', "
                "'file-x', '24h', :st, :t, :t, :e, :n)"),
                {"id": f"batch_{i}", "st": status, "t": int(now) - 3600, "e": int(now) + 86400, "n": n // BATCHES})
            for w in range(WORKERS):
                c.execute(sa.text("INSERT INTO batch_counts VALUES (:b, :w, :c, 0, :p, 0, :o)"),
                          {"b": f"batch_{i}", "w": f"worker_{w}", "c": n // BATCHES // WORKERS, "p": 20 * n, "o": n})
        for w in range(WORKERS):
            c.execute(sa.text(
                "INSERT INTO workers (id, model, engine, kv_capacity_tokens, host, pid, started_at, heartbeat_at, "
                "interactive_share) VALUES (:id, 'm', 'cpu', 100000, 'h', 1, :t, :t, 0)"), {"id": f"worker_{w}",
                                                                                          "t": now})
        c.execute(sa.text(
            "INSERT INTO requests (batch_id, line, custom_id, model, body, status, prompt_tokens, completion_tokens, "
            "cached_tokens, attempts, finished_at) SELECT 'batch_' || (g % :b), g, 'r' || g, 'm', '{}'::json, "
            "CASE WHEN g % :b < 4 AND g % 10 = 0 THEN 'pending' ELSE 'completed' END, 20, 10, 0, 0, :t "
            "FROM generate_series(1, :n) g"), {"b": BATCHES, "n": n, "t": now})
        c.execute(sa.text("ANALYZE"))


def timed(fn, repeats: int) -> tuple[float, float]:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return statistics.median(ts) * 1e3, ts[min(len(ts) - 1, int(len(ts) * 0.99))] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True, help="a PostgreSQL URL; a fresh schema is made in it per size")
    ap.add_argument("--sizes", default="10000,1000000")
    ap.add_argument("--scrapes", type=int, default=200)
    args = ap.parse_args()
    admin = sa.create_engine(args.db)
    for n in (int(x) for x in args.sizes.split(",")):
        schema = f"m_{secrets.token_hex(4)}"
        with admin.begin() as c:
            c.execute(sa.text(f"CREATE SCHEMA {schema}"))
        url = f"{args.db}?options=-csearch_path%3D{schema}"
        try:
            upgrade(url)
            t0 = time.time()
            fill(url, n)
            filled = time.time() - t0
            reader = make_sessionmaker(make_engine(url, readonly=True))
            registry = CollectorRegistry(auto_describe=False)
            registry.register(JobTableCollector(reader, 30.0))
            generate_latest(registry)
            p50, p99 = timed(lambda: generate_latest(registry), args.scrapes)
            old = [sa.text("SELECT status, model, count(*) FROM requests GROUP BY status, model"),
                   sa.text("SELECT sum(prompt_tokens), sum(cached_tokens), sum(completion_tokens) FROM requests "
                           "WHERE status = 'completed'")]
            with reader() as s:
                o50, o99 = timed(lambda: [s.execute(q).all() for q in old], 10)
            print(f"requests={n}: scrape p50 {p50:.2f} ms, p99 {p99:.2f} ms ({args.scrapes} scrapes); "
                  f"the former per-request aggregates alone p50 {o50:.1f} ms, p99 {o99:.1f} ms "
                  f"(fill {filled:.0f} s)", flush=True)
        finally:
            with admin.begin() as c:
                c.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))


if __name__ == "__main__":
    main()
