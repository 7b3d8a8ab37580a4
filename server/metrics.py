"""Prometheus metrics for the whole deployment, read from the job table at scrape time.

The scheduler and the workers are other processes (on other machines, at
scale-out), so the API does not count events itself: every figure is derived
from rows the roles write: the job table, the load each worker pushes with its
heartbeat, and the running totals the scheduler keeps on each model's newest
planning round (scheduler/rounds.py). One scrape of the API therefore sees
the whole deployment, and a restarted API loses nothing. The queries run on a
read-only engine, so a scrape never waits for, or blocks, the workers' writes.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from core.models import ROUND_BUCKETS_S, Batch, Chunk, PlanningRound, Request, Worker

RATE_WINDOW_S = 60.0       # per-worker tokens/s: results written in the last minute


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
        g = GaugeMetricFamily("blendserve_requests", "Requests by status and model.", labels=["status", "model"])
        for status, model, n in s.execute(select(Request.status, Request.model, func.count())
                                          .group_by(Request.status, Request.model)):
            g.add_metric([status, model], n)
        yield g
        done = Request.status == "completed"
        prompt, cached, completion = s.execute(select(
            func.coalesce(func.sum(Request.prompt_tokens), 0), func.coalesce(func.sum(Request.cached_tokens), 0),
            func.coalesce(func.sum(Request.completion_tokens), 0)).where(done)).one()
        for name, value, what in (("prompt", prompt, "Prompt tokens of completed requests."),
                                  ("cached", cached, "Prompt tokens served from a prefix cache."),
                                  ("completion", completion, "Completion tokens generated.")):
            yield CounterMetricFamily(f"blendserve_{name}_tokens", what, value=int(value))
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
        rate = GaugeMetricFamily("blendserve_worker_tokens_per_second",
                                 f"Prompt + completion tokens of the worker's results in the last {RATE_WINDOW_S:.0f} s.",
                                 labels=labels)
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
        tokens = dict(s.execute(
            select(Chunk.worker_id, func.sum(Request.prompt_tokens + Request.completion_tokens))
            .join(Chunk, Chunk.id == Request.chunk_id)
            .where(Request.status == "completed", Request.finished_at > now - RATE_WINDOW_S)
            .group_by(Chunk.worker_id)).all())
        claimed = dict(s.execute(select(Chunk.worker_id, func.count()).where(Chunk.status == "claimed")
                                 .group_by(Chunk.worker_id)).all())
        live = s.execute(select(Worker).where(Worker.heartbeat_at > now - 10 * self.lease_s)).scalars()
        for w in live:
            key = [w.id, w.model, w.engine]
            beat.add_metric(key, now - w.heartbeat_at)
            kv.add_metric(key, w.kv_capacity_tokens)
            rate.add_metric(key, float(tokens.get(w.id) or 0) / RATE_WINDOW_S)
            held.add_metric(key, claimed.get(w.id, 0))
            if w.running_sequences is not None:          # engines that cannot say are left out, not shown as 0
                running.add_metric(key, w.running_sequences)
            if w.kv_used_tokens is not None:
                kv_used.add_metric(key, w.kv_used_tokens)
            lane.add_metric(key, w.interactive_share)
        yield from (beat, kv, rate, held, running, kv_used, lane)

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
