"""Planning rounds as the scheduler records them and /metrics reads them: running totals that survive pruning."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from blendserve.api.metrics import JobTableCollector
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.models import PlanningRound
from blendserve.migrations.upgrade import upgrade
from blendserve.scheduler import rounds
from tests.live import pg_schema_url


def _scrape(sessions) -> dict[tuple[str, tuple], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobTableCollector(sessions, 30.0))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(generate_latest(registry).decode()) for s in fam.samples}


def test_totals_outlive_the_rows_they_summarise(tmp_path, backend):
    url = f"sqlite:///{tmp_path}/db.sqlite" if backend == "sqlite" else pg_schema_url()
    upgrade(url)
    sessions = make_sessionmaker(make_engine(url))
    t = 1_000_000.0
    with sessions.begin() as s:
        rounds.record(s, "a", t, 0.03, 100, rounds.RoundEstimate(50.0, 20.0, 40.0, 1000.0, 3000.0))
        rounds.record(s, "b", t + 1, 7.0, 5, None)                 # FCFS: no estimate
        rounds.record(s, "a", t + 2, 0.4, 60, None)
    m = _scrape(sessions)
    assert m[("blendserve_planning_rounds_total", (("model", "a"),))] == 2
    assert m[("blendserve_planned_requests_total", (("model", "a"),))] == 160
    a = lambda le: m[("blendserve_planning_round_duration_seconds_bucket", (("le", le), ("model", "a")))]  # noqa: E731
    assert (a("0.01"), a("0.05"), a("0.25"), a("0.5"), a("+Inf")) == (0, 1, 1, 2, 2)
    assert abs(m[("blendserve_planning_round_duration_seconds_sum", (("model", "a"),))] - 0.43) < 1e-9
    assert m[("blendserve_planning_round_duration_seconds_count", (("model", "b"),))] == 1

    with sessions.begin() as s:                                     # a day later: a's old rows go, b's stay
        rounds.record(s, "a", t + rounds.KEEP_S + 10, 0.02, 1, None)
    with sessions() as s:
        kept = s.execute(select(PlanningRound.model, PlanningRound.requests).order_by(PlanningRound.id)).all()
        first = s.scalar(select(PlanningRound).where(PlanningRound.model == "a").limit(1))
    assert [tuple(r) for r in kept] == [("b", 5), ("a", 1)]
    assert first.est_seconds is None
    m = _scrape(sessions)
    assert m[("blendserve_planning_rounds_total", (("model", "a"),))] == 3          # no counter went back
    assert m[("blendserve_planned_requests_total", (("model", "a"),))] == 161
    assert m[("blendserve_planning_rounds_total", (("model", "b"),))] == 1
