"""/dashboard: a server-rendered page of batches, workers and throughput; no JavaScript build step.

With BLENDSERVE_API_KEYS set, a browser cannot send an Authorization header
from the address bar, so the page offers a form that POSTs the key once to
`/dashboard/login` (a POST: the key never lands in an access log, a proxy's
log or the browser's history). The answer is a signed, expiring session
cookie that names the tenant, never the key (blendserve/api/sessions.py): HttpOnly,
SameSite=Strict, Secure per BLENDSERVE_COOKIE_SECURE. A login POSTed from
another site is refused, so a link cannot log a victim into someone else's
dashboard. A Bearer header works on every request as well. Each tenant sees
its own batches, exactly as through the API.

`/dashboard/batches/{id}` is the same progress as JSON (done/total, tokens/s,
ETA and where the ETA came from), for `blendserve status` and
`submit --wait`: the Batch API has no field for an ETA.
"""
from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel
from sqlalchemy import select

from blendserve.api import dashboard
from blendserve.api.auth import bearer, session_cookie
from blendserve.api.deps import AppState, StateDep
from blendserve.api.errors import APIError, check_id
from blendserve.api.sessions import COOKIE
from blendserve.core.models import Batch

router = APIRouter(tags=["dashboard"])
templates = Jinja2Templates(directory=Path(__file__).resolve().parent.parent / "templates")
REFRESH_S = 1                  # the page's tables, fetched again in place (a full reload without JavaScript)
HISTORY_EVERY = 10             # refreshes between two fetches of the chart and the planning rounds

_LOGIN = """<!doctype html><html><head><meta charset="utf-8"><title>BlendServe dashboard</title></head>
<body style="font: 14px system-ui, sans-serif; margin: 2rem"><h1>BlendServe</h1><p>{message}</p>
<form method="post" action="/dashboard/login"><label>API key <input name="key" type="password" autofocus
autocomplete="off"></label> <button type="submit">Open</button></form></body></html>"""


class BatchProgress(BaseModel):
    id: str
    status: str
    done: int                  # completed + failed requests
    total: int
    tokens_per_s: float        # prompt + completion tokens of its results, per second since its first request ran
    cached_share: float
    eta_s: float | None        # None: not running, or no ETA yet
    eta_source: str | None     # "observed" (its own rate) | "estimate" (the planner's, before enough ran)
    #                            | "overdue" (the estimate passed before enough ran; eta_s is None)
    phase: str | None = None   # running only: planning | waiting for a worker | warming up | running
    reason: str | None = None  # failed, cancelled or expired: why
    in_engine: int | None = None   # warming up: its requests in chunks a worker holds


def _owner(request: Request, st: AppState) -> str | None:
    """The caller's tenant from a Bearer key or a session cookie; "" without keys configured; None: neither."""
    if not st.keyring:
        return ""
    token = bearer(request.scope)
    if token is not None:
        return st.keyring.owner_of(token)
    return st.signer.owner(session_cookie(request.scope), st.keyring)


def _same_site(request: Request) -> bool:
    """A login must come from this dashboard's own form: a cross-site POST (login CSRF) is refused."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host")


@router.post("/dashboard/login", response_class=HTMLResponse, responses={
    303: {"description": "a session cookie, then the dashboard"}, 401: {"description": "the key form again"}})
async def login(request: Request, st: StateDep) -> Response:
    if not _same_site(request):
        return HTMLResponse(_LOGIN.format(message="Log in from this dashboard's own page."), status_code=403)
    try:        # the form has one field; a body of many is not this form's
        form = parse_qs((await request.body()).decode("utf-8", errors="replace"), max_num_fields=4)
    except ValueError:
        return HTMLResponse(_LOGIN.format(message="That is not this page's form."), status_code=400)
    key = (form.get("key") or [""])[0].strip()
    found = st.keyring.lookup(key) if key else None
    if st.keyring and found is None:
        return HTMLResponse(_LOGIN.format(message="That is not a valid API key."), status_code=401)
    to = RedirectResponse("/dashboard", status_code=303)
    if found is not None:
        secure = {"always": True, "never": False}.get(st.settings.cookie_secure, request.url.scheme == "https")
        to.set_cookie(COOKIE, st.signer.issue(*found), max_age=st.settings.session_ttl_s, httponly=True,
                      samesite="strict", secure=secure, path="/dashboard")
    return to


@router.post("/dashboard/logout", response_class=HTMLResponse, responses={303: {"description": "the key form"}})
def logout() -> Response:
    to = RedirectResponse("/dashboard", status_code=303)
    to.delete_cookie(COOKIE, path="/dashboard")
    return to


@router.get("/dashboard", response_class=HTMLResponse, responses={401: {"description": "the key form"}})
def page(request: Request, st: StateDep, part: str | None = None) -> Response:
    """The page; `?part=tables` is its batches and workers alone, which the page fetches every REFRESH_S
    (they read a few rows per batch), while the chart and the rounds, which read the last ten minutes of
    results, come with the whole page every HISTORY_EVERY refreshes."""
    owner = _owner(request, st)
    if owner is None:
        return HTMLResponse(_LOGIN.format(message="Enter an API key to see its batches."), status_code=401)
    tables = part == "tables"
    with st.read_sessions() as s:
        snap = (dashboard.tables(s, owner if st.keyring else None, st.settings.lease_seconds) if tables
                else dashboard.snapshot(s, owner if st.keyring else None, st.settings.lease_seconds))
    return templates.TemplateResponse(request, "dashboard.html", {
        **snap, "refresh": REFRESH_S, "history_every": HISTORY_EVERY, "tables_only": tables,
        "updated": time.strftime("%H:%M:%S", time.localtime(snap["now"])), "peak": snap.get("peak_tokens_per_s"),
        "clock": lambda t: time.strftime("%H:%M:%S", time.localtime(t))})


@router.get("/dashboard/batches/{batch_id}", responses={401: {"description": "no valid key"},
                                                         404: {"description": "no such batch for this key"}})
def progress(batch_id: str, request: Request, st: StateDep) -> BatchProgress:
    """Authenticated by the front door (blendserve/api/auth.py: a Bearer key or a session cookie)."""
    owner = request.scope.get("state", {}).get("owner")
    if owner is None:
        raise APIError(401, "A valid API key is required.", code="invalid_api_key")
    with st.read_sessions() as s:
        q = select(Batch).where(Batch.id == check_id("batch", batch_id))
        b = s.scalar(q if not st.keyring else q.where(Batch.owner == owner))
        if b is None:
            return JSONResponse({"detail": f"no batch {batch_id}"}, status_code=404)
        v = dashboard.batch_view(s, b, time.time(), st.settings.lease_seconds)
    return BatchProgress(id=v.id, status=v.status, done=v.done, total=v.total, tokens_per_s=v.tokens_per_s,
                         cached_share=v.cached_share, eta_s=v.eta_s, eta_source=v.eta_source, phase=v.phase,
                         reason=v.reason, in_engine=v.in_engine)
