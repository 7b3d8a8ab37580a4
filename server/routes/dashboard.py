"""/dashboard: a server-rendered page of batches, workers and throughput; no JavaScript build step.

With BLENDSERVE_API_KEYS set, a browser cannot send an Authorization header
from the address bar, so the key may come once as `?key=` (answered by a
redirect that stores it in an HttpOnly, SameSite=Strict cookie and drops it
from the URL) or on every request as a Bearer header. Each key sees its own
batches, exactly as through the API.

`/dashboard/batches/{id}` is the same progress as JSON (done/total, tokens/s,
ETA and where the ETA came from), for `blendserve status` and
`submit --wait`: the Batch API has no field for an ETA.
"""
from __future__ import annotations

import hmac
import time
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel
from sqlalchemy import select

from core.models import Batch
from server import dashboard
from server.deps import StateDep, owner_of_key

router = APIRouter(tags=["dashboard"])
templates = Jinja2Templates(directory=Path(__file__).resolve().parent.parent / "templates")
COOKIE = "blendserve_key"
REFRESH_S = 5

_LOGIN = """<!doctype html><html><head><meta charset="utf-8"><title>BlendServe dashboard</title></head>
<body style="font: 14px system-ui, sans-serif; margin: 2rem"><h1>BlendServe</h1><p>{message}</p>
<form method="get" action="/dashboard"><label>API key <input name="key" type="password" autofocus></label>
<button type="submit">Open</button></form></body></html>"""


class BatchProgress(BaseModel):
    id: str
    status: str
    done: int                  # completed + failed requests
    total: int
    tokens_per_s: float        # prompt + completion tokens of its results, per second since in_progress
    cached_share: float
    eta_s: float | None        # None: not running, or no ETA yet
    eta_source: str | None     # "observed" (its own rate) | "estimate" (the planner's, before enough ran)


def _owner(request: Request, keys: list[str]) -> str | None:
    """The caller's owner digest; "" without keys configured; None when no valid key came."""
    if not keys:
        return ""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else request.cookies.get(COOKIE, "")
    for k in keys:
        if token and hmac.compare_digest(k.encode(), token.encode()):
            return owner_of_key(k)
    return None


@router.get("/dashboard", response_class=HTMLResponse, responses={303: {"description": "key stored in a cookie"},
                                                                  401: {"description": "the key form"}})
def page(request: Request, st: StateDep, key: str | None = None) -> Response:
    keys = st.settings.api_key_list()
    if key is not None:
        if not key.isascii() or not key.isprintable() or any(c in key for c in ' ;,"\\'):
            return HTMLResponse(_LOGIN.format(message="That is not an API key."), status_code=401)
        to = RedirectResponse("/dashboard", status_code=303)
        to.set_cookie(COOKIE, key, httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return to
    owner = _owner(request, keys)
    if owner is None:
        return HTMLResponse(_LOGIN.format(message="Enter an API key to see its batches."), status_code=401)
    with st.read_sessions() as s:
        snap = dashboard.snapshot(s, owner if keys else None, st.settings.lease_seconds)
    return templates.TemplateResponse(request, "dashboard.html", {
        "refresh": REFRESH_S, "updated": time.strftime("%H:%M:%S", time.localtime(snap["now"])),
        "batches": snap["batches"], "workers": snap["workers"], "rounds": snap["rounds"],
        "peak": snap["peak_tokens_per_s"], "throughput_points": snap["throughput_points"],
        "mix_points": snap["mix_points"], "planned_points": snap["planned_points"],
        "clock": lambda t: time.strftime("%H:%M:%S", time.localtime(t))})


@router.get("/dashboard/batches/{batch_id}", responses={401: {"description": "no valid key"},
                                                         404: {"description": "no such batch for this key"}})
def progress(batch_id: str, request: Request, st: StateDep) -> BatchProgress:
    keys = st.settings.api_key_list()
    owner = _owner(request, keys)
    if owner is None:
        return JSONResponse({"detail": "a valid API key is required"}, status_code=401)
    with st.read_sessions() as s:
        q = select(Batch).where(Batch.id == batch_id)
        b = s.scalar(q if not keys else q.where(Batch.owner == owner))
        if b is None:
            return JSONResponse({"detail": f"no batch {batch_id}"}, status_code=404)
        v = dashboard.batch_view(s, b, time.time())
    return BatchProgress(id=v.id, status=v.status, done=v.done, total=v.total, tokens_per_s=v.tokens_per_s,
                         cached_share=v.cached_share, eta_s=v.eta_s, eta_source=v.eta_source)
