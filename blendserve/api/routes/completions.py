"""The interactive lane's front door: /v1/chat/completions and /v1/completions, forwarded to a live worker.

The API authenticates the caller, checks that the model is served and that
the body passes the rules a worker holds it to (blendserve/api/body_rules.py),
and hands the raw body to a worker of that model over HTTP (its row in the job table
says where it listens; blendserve/worker/interactive.py answers). The worker checks the
body with the same rules as a batch line, runs it at its engine's next step
ahead of batch work, and answers as OpenAI does, JSON or server-sent events;
this route relays the answer byte for byte. Workers are picked round-robin
among those whose heartbeat is fresh; a worker that cannot be reached, or
that is stopping, is skipped for the next one before the caller sees a 503.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from blendserve.api.deps import AppState, OwnerDep, StateDep
from blendserve.api.errors import APIError
from blendserve.api.interactive_caps import relay
from blendserve.api.lanes import Lanes
from blendserve.api.schemas import ERRORS, ChatCompletion, Completion
from blendserve.core.config import TENANT_HEADER

router = APIRouter(tags=["completions"])

MAX_BODY = 8 * 1024 * 1024
INLINE_RULES = 64 * 1024      # bodies up to this size are checked on the event loop (well under a millisecond)
_REQUEST_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["model"], "properties": {"model": {"type": "string"}}}}}}}
_RESPONSES: dict[int | str, dict[str, Any]] = {**ERRORS, 503: ERRORS[400],
                                                200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}}}


async def _forward(request: Request, st: AppState, path: str) -> Response:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise APIError(413, f"The request body exceeds {MAX_BODY} bytes.", code="request_too_large")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise APIError(400, f"The request body is not valid JSON: {e}.", code="invalid_json") from None
    model = body.get("model") if isinstance(body, dict) else None
    if not isinstance(model, str) or not model:
        raise APIError(400, "Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
    if model not in st.model_names:
        raise APIError(404, f"The model '{model}' does not exist; served: {sorted(st.model_names)}.",
                       param="model", code="model_not_found")
    lanes = st.lanes
    lanes.shares.check_size(body, model, lanes.checkpoints.get(model), raw)   # 400 past the body's bounds
    if len(raw) > INLINE_RULES:        # a large body's rules off the event loop, which other callers share
        await run_in_threadpool(lanes.rules.check, path, body, model)
    else:
        lanes.rules.check(path, body, model)                                 # 400: the worker's rules refuse it
    owner = request.scope["state"].get("owner") or ""
    release = lanes.shares.take(owner)                                       # 429 past the tenant's share
    return await relay(request, _upstream(lanes, model, path, raw, owner), release)


async def _upstream(lanes: Lanes, model: str, path: str, raw: bytes, owner: str) -> httpx.Response:
    """The first live worker's response (its body not read yet). The worker learns the caller's tenant, whose
    turn its engine keeps among other tenants' interactive work (docs/design.md §12.3)."""
    tenant = hashlib.blake2b(owner.encode(), digest_size=8).hexdigest() if owner else ""   # any name, header-safe
    headers = {"content-type": "application/json", TENANT_HEADER: tenant}
    for url in await lanes.for_model(model):
        try:
            upstream = await lanes.http().send(
                lanes.http().build_request("POST", url + path, content=raw, headers=headers), stream=True)
        except httpx.TransportError:
            lanes.forget()                   # that worker is gone: re-read the list next time
            continue
        if upstream.status_code == 503:      # stopping: the next worker may take it
            await upstream.aclose()
            continue
        return upstream
    raise APIError(503, f"No live worker serves interactive requests for '{model}' right now.",
                   code="no_worker_available")


@router.post("/v1/chat/completions", response_model=ChatCompletion, responses=_RESPONSES,
             openapi_extra=_REQUEST_BODY)
async def chat_completions(request: Request, st: StateDep, _: OwnerDep) -> Response:
    return await _forward(request, st, "/v1/chat/completions")


@router.post("/v1/completions", response_model=Completion, responses=_RESPONSES, openapi_extra=_REQUEST_BODY)
async def completions(request: Request, st: StateDep, _: OwnerDep) -> Response:
    return await _forward(request, st, "/v1/completions")
