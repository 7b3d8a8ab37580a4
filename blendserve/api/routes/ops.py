"""Operations endpoints at the server root: liveness, readiness and Prometheus metrics.

`/health` says the process is up; `/ready` says the deployment can make
progress (an orchestrator routes traffic and restarts on it): the database
answers, a scheduler holds a fresh lease, and every served model has a live
worker. They are not behind API keys, as probes and scrapers carry none, and
they expose counts, never batch contents.
"""
from __future__ import annotations

import time

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel
from sqlalchemy import func, select, text

from blendserve.api.deps import StateDep
from blendserve.api.metrics import JobTableCollector
from blendserve.api.schemas import Health
from blendserve.core.models import Lease, Worker

router = APIRouter(tags=["operations"])


class Readiness(BaseModel):
    status: str                 # "ready" | "not_ready"
    reasons: list[str]


@router.get("/health")
def health() -> Health:
    return Health(status="ok")


@router.get("/ready", responses={503: {"model": Readiness}})
def ready(st: StateDep) -> Readiness:
    now, reasons = time.time(), []
    try:
        with st.read_sessions() as s:
            s.execute(text("SELECT 1"))
            lease = s.scalar(select(Lease.until).where(Lease.name == "scheduler"))
            alive = dict(s.execute(select(Worker.model, func.count())
                                   .where(Worker.heartbeat_at > now - st.settings.lease_seconds)
                                   .group_by(Worker.model)).all())
    except Exception as e:      # the probe's whole point is to say this, not to 500
        return JSONResponse(Readiness(status="not_ready", reasons=[f"database unreachable: {e.__class__.__name__}"])
                            .model_dump(), status_code=503)
    if not lease or lease < now:
        reasons.append("no scheduler holds a fresh lease")
    reasons += [f"no live worker for model {m!r}" for m in st.model_names if not alive.get(m)]
    if reasons:
        return JSONResponse(Readiness(status="not_ready", reasons=reasons).model_dump(), status_code=503)
    return Readiness(status="ready", reasons=[])


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(st: StateDep) -> Response:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobTableCollector(st.read_sessions, st.settings.lease_seconds))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
