"""Prometheus metrics for the whole deployment, read at scrape time from counters the roles keep.

The scheduler and the workers are other processes (on other machines, at
scale-out), so the API does not count events itself: every figure comes from
rows the roles keep up to date as they work: the per-batch counter rows each
writer adds to in the transaction that finishes requests (blendserve/core/counts.py),
the batch rows (status, model, total), the load each worker pushes with its
heartbeat, and the running totals the scheduler keeps on each model's newest
planning round (blendserve/scheduler/rounds.py). A scrape reads rows per batch, per
worker and per model, never per request: its cost does not grow with the
requests table (10K or 1M rows alike; BENCHMARKS.md). One scrape of any API
sees the whole deployment, and a restarted API loses nothing. The queries run
on a read-only engine, so a scrape never waits for, or blocks, the workers'
writes. BLENDSERVE_METRICS_TOKEN puts the route behind its own Bearer token
(blendserve/api/auth.py).
"""
from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from blendserve.core.models import ROUND_BUCKETS_S, Batch, BatchCount, Chunk, PlanningRound, Request, Worker

UNFINISHED = ("validating", "in_progress", "finalizing", "cancelling")


class JobTableCollector(Collector):
    def __init__(self, sessions: sessionmaker[Session], lease_s: float) -> None:
        self.sessions, self.lease_s = sessions, lease_s

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        with self.sessions() as s:
            yield from self._batches(s)
            yield from self._requests(s, now)
            yield from self._workers(s, now)
            yield from self._rounds(s)

    def _batches(self, s: Session) -> Iterator[Metric]:
        g = GaugeMetricFamily("blendserve_batches", "Batches by status.", labels=["status"])
        for status, n in s.execute(select(Batch.status, func.count()).group_by(Batch.status)):
            g.add_metric([status], n)
        yield g

    def _requests(self, s: Session, now: float) -> Iterator[Metric]:
        """Requests per model: completed and failed (cancelled and expired included) from the counter rows,
        unfinished as the unfinished batches' totals less what their counters say has finished."""
        g = GaugeMetricFamily("blendserve_requests", "Requests by status (completed, failed, unfinished) and model.",
                              labels=["status", "model"])
        done = s.execute(select(Batch.model, Batch.status, func.coalesce(func.sum(BatchCount.completed), 0),
                                func.coalesce(func.sum(BatchCount.failed), 0))
                         .join(Batch, Batch.id == BatchCount.batch_id).group_by(Batch.model, Batch.status)).all()
        completed: dict[str, int] = {}
        failed: dict[str, int] = {}
        open_done: dict[str, int] = {}
        for model, status, c, f in done:
            m = model or ""
            completed[m] = completed.get(m, 0) + int(c)
            failed[m] = failed.get(m, 0) + int(f)
            if status in UNFINISHED:
                open_done[m] = open_done.get(m, 0) + int(c) + int(f)
        totals = dict(s.execute(select(Batch.model, func.coalesce(func.sum(Batch.total), 0))
                                .where(Batch.status.in_(UNFINISHED)).group_by(Batch.model)).all())
        for m, n in completed.items():
            g.add_metric(["completed", m], n)
        for m, n in failed.items():
            g.add_metric(["failed", m], n)
        for model, total in totals.items():
            g.add_metric(["unfinished", model or ""], max(0, int(total) - open_done.get(model or "", 0)))
        yield g
        prompt, cached, completion = s.execute(select(*(func.coalesce(func.sum(getattr(BatchCount, f)), 0) for f in (
            "prompt_tokens", "cached_tokens", "completion_tokens")))).one()
        for name, value, what in (("prompt", prompt, "Prompt tokens of completed requests."),
                                  ("cached", cached, "Prompt tokens served from a prefix cache."),
                                  ("completion", completion, "Completion tokens generated.")):
            yield CounterMetricFamily(f"blendserve_{name}_tokens", what, value=int(value))
        # One index probe (batch, status) per in-progress batch.
        oldest = s.scalar(select(func.min(Batch.in_progress_at)).where(
            Batch.status == "in_progress",
            select(Request.id).where(Request.batch_id == Batch.id,
                                     Request.status.in_(("queued", "pending"))).exists()))
        yield GaugeMetricFamily("blendserve_oldest_unplanned_age_seconds",
                                "How long the oldest batch with unplanned requests has been in progress.",
                                value=max(0.0, now - oldest) if oldest else 0.0)

    def _workers(self, s: Session, now: float) -> Iterator[Metric]:
        labels = ["worker", "model", "engine"]
        beat = GaugeMetricFamily("blendserve_worker_heartbeat_age_seconds", "Seconds since the worker's heartbeat.",
                                 labels=labels)
        kv = GaugeMetricFamily("blendserve_worker_kv_capacity_tokens", "KV cache capacity the worker reported.",
                               labels=labels)
        tokens_total = CounterMetricFamily("blendserve_worker_tokens",
                                           "Prompt + completion tokens of the worker's completed batch requests "
                                           "(rate() gives its throughput).", labels=labels)
        held = GaugeMetricFamily("blendserve_worker_claimed_chunks", "Plan chunks the worker holds now.",
                                 labels=labels)
        running = GaugeMetricFamily("blendserve_worker_running_sequences",
                                    "Sequences the worker's engine runs, as of its last heartbeat.", labels=labels)
        lane = GaugeMetricFamily("blendserve_worker_interactive_share",
                                 "Share of the worker's tokens its interactive lane took in the last minute "
                                 "(the planner paces batch work to the rest).", labels=labels)
        kv_used = GaugeMetricFamily("blendserve_worker_kv_used_tokens",
                                    "KV cache tokens the engine's running sequences hold, as of its last heartbeat.",
                                    labels=labels)
        tokens = dict(s.execute(select(BatchCount.writer,
                                       func.sum(BatchCount.prompt_tokens + BatchCount.completion_tokens))
                                .group_by(BatchCount.writer)).all())
        claimed = dict(s.execute(select(Chunk.worker_id, func.count()).where(Chunk.status == "claimed")
                                 .group_by(Chunk.worker_id)).all())
        live = s.execute(select(Worker).where(Worker.heartbeat_at > now - 10 * self.lease_s)).scalars()
        for w in live:
            key = [w.id, w.model, w.engine]
            beat.add_metric(key, max(0.0, now - w.heartbeat_at))   # a beat written after `now` was read
            kv.add_metric(key, w.kv_capacity_tokens)
            tokens_total.add_metric(key, float(tokens.get(w.id) or 0))
            held.add_metric(key, claimed.get(w.id, 0))
            if w.running_sequences is not None:          # engines that cannot say are left out, not shown as 0
                running.add_metric(key, w.running_sequences)
            if w.kv_used_tokens is not None:
                kv_used.add_metric(key, w.kv_used_tokens)
            lane.add_metric(key, w.interactive_share)
        yield from (beat, kv, tokens_total, held, running, kv_used, lane)

    def _rounds(self, s: Session) -> Iterator[Metric]:
        """Planning rounds per model: the running totals the scheduler keeps on each model's newest round."""
        total = CounterMetricFamily("blendserve_planning_rounds", "Planning rounds run.", labels=["model"])
        planned = CounterMetricFamily("blendserve_planned_requests", "Requests (re)planned by planning rounds.",
                                      labels=["model"])
        hist = HistogramMetricFamily("blendserve_planning_round_duration_seconds",
                                     "Wall time of a planning round (read, plan, write).", labels=["model"])
        newest = select(func.max(PlanningRound.id)).group_by(PlanningRound.model)
        for r in s.scalars(select(PlanningRound).where(PlanningRound.id.in_(newest))):
            total.add_metric([r.model], r.rounds_total)
            planned.add_metric([r.model], r.requests_total)
            hist.add_metric([r.model], [(str(b), n) for b, n in zip(ROUND_BUCKETS_S, r.buckets_total)]
                            + [("+Inf", r.rounds_total)], sum_value=r.seconds_total)
        yield from (total, planned, hist)
