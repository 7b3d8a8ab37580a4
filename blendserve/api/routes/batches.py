"""/v1/batches: create, retrieve, cancel, list. Work happens in the scheduler and workers."""
from __future__ import annotations

import time

import orjson
from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import select, update

from blendserve.api import quotas
from blendserve.api.deps import OwnerDep, SessionDep, StateDep, read
from blendserve.api.errors import APIError, check_id, not_found
from blendserve.api.expiry import ExpiresAfter
from blendserve.api.pagination import after_cursor
from blendserve.api.routes.files import get_owned
from blendserve.api.schemas import ERRORS, BatchList, BatchObject
from blendserve.api.serialize import batch_obj, page
from blendserve.api.status import batch_status
from blendserve.core import bell
from blendserve.core.ids import new_id
from blendserve.core.jobs import batch_stats
from blendserve.core.models import Batch

router = APIRouter(prefix="/v1/batches", tags=["batches"])

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
CANCELLABLE = ("validating", "in_progress")


class CreateBatch(BaseModel):
    """Unknown fields are refused (400), as OpenAI does; the schema's enums and bounds match the checks below,
    and the app fills completion_window's enum from the configured windows. Metadata is the caller's own, as
    at OpenAI: a `priority` of "high", "normal" or "low" orders the batch's work (blendserve/scheduler/priority.py), any
    other value is kept and ignored."""
    model_config = ConfigDict(extra="forbid")

    input_file_id: str
    endpoint: str = Field(json_schema_extra={"enum": list(ENDPOINTS)})
    completion_window: str
    metadata: dict[str, str] | None = Field(default=None, json_schema_extra={
        "maxProperties": 16, "propertyNames": {"maxLength": 64},
        "additionalProperties": {"type": "string", "maxLength": 512}})
    output_expires_after: ExpiresAfter | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is None:
            return v
        if len(v) > 16:
            raise ValueError("at most 16 key-value pairs")
        for k, val in v.items():
            if len(k) > 64:
                raise ValueError(f"key '{k[:20]}...' is longer than 64 characters")
            if len(val) > 512:
                raise ValueError(f"value of '{k}' is longer than 512 characters")
        return v


def get_owned_batch(session, owner: str, batch_id: str) -> Batch:
    b = session.get(Batch, check_id("batch", batch_id))
    if b is None or b.owner != owner:
        raise not_found("batch", batch_id)
    return b


def render(session, b: Batch) -> dict:
    return batch_obj(b, batch_stats(session, [b.id])[b.id])


@router.post("", response_model=BatchObject, responses=ERRORS)
def create_batch(req: CreateBatch, session: SessionDep, owner: OwnerDep, st: StateDep) -> dict:
    if req.endpoint not in ENDPOINTS:
        raise APIError(400, f"Invalid endpoint '{req.endpoint}': supported endpoints are {list(ENDPOINTS)}.",
                       param="endpoint", code="invalid_value")
    windows = st.settings.completion_windows
    if req.completion_window not in windows:
        raise APIError(400, f"Invalid completion_window '{req.completion_window}': supported values are "
                       f"{list(windows)}.", param="completion_window", code="invalid_value")
    f = get_owned(session, owner, req.input_file_id, lock=True)    # a delete of it waits for this create
    if f.purpose != "batch":
        raise APIError(400, f"File '{f.id}' has purpose '{f.purpose}'; a batch needs a file with purpose 'batch'.",
                       param="input_file_id", code="invalid_value")
    quotas.check_queue(session, st.settings, st.store, owner, f)
    quotas.check_tokens(session, st.settings, st.store, owner, f)
    now = int(time.time())
    b = Batch(id=new_id("batch_"), owner=owner, endpoint=req.endpoint, input_file_id=f.id,
              completion_window=req.completion_window, status="validating", metadata_=req.metadata,
              created_at=now, expires_at=now + windows[req.completion_window], total=0,
              output_expires_after_s=req.output_expires_after.seconds if req.output_expires_after else None)
    session.add(b)
    session.commit()
    bell.ring(st.settings.data_dir, "batches")     # the scheduler validates it now, not after its idle wait
    return render(session, b)


@router.get("", response_model=BatchList, responses=ERRORS)
async def list_batches(st: StateDep, owner: OwnerDep, after: str | None = None,
                       limit: int = Query(20, ge=1, le=100)) -> dict:
    return await read(st, _list_batches, owner, after, limit)


def _list_batches(session, owner: str, after: str | None, limit: int) -> dict:
    q = select(Batch).where(Batch.owner == owner)
    if after:
        cur = get_owned_batch(session, owner, after)      # batches are never deleted: a cursor always resolves
        q = q.where(after_cursor((Batch.created_at, Batch.id), (cur.created_at, cur.id), descending=True))
    rows = session.scalars(q.order_by(Batch.created_at.desc(), Batch.id.desc()).limit(limit + 1)).all()
    rows, has_more = rows[:limit], len(rows) > limit
    stats = batch_stats(session, [b.id for b in rows])
    return page([batch_obj(b, stats[b.id]) for b in rows], has_more)


@router.get("/{batch_id}", response_model=BatchObject, responses=ERRORS)
async def retrieve_batch(batch_id: str, st: StateDep, owner: OwnerDep) -> Response:
    """The status poll. It returns its JSON itself: FastAPI's response_model pass (validate, then encode)
    costs more than the database read, and this route is called hundreds of times a second; the schema
    fuzzer checks the body against BatchObject instead. Repeats within a fraction of a second come from
    StatusCache, without a thread hop or a database read, and polls that miss together share one read."""
    async def fresh() -> bytes:
        return orjson.dumps(await read(st, batch_status, owner, batch_id))

    return Response(await st.status_cache.read_through(owner, batch_id, fresh), media_type="application/json")


@router.post("/{batch_id}/cancel", response_model=BatchObject, responses=ERRORS)
def cancel_batch(batch_id: str, session: SessionDep, owner: OwnerDep, st: StateDep) -> dict:
    """Conditional: a batch the scheduler finalized a moment ago is never flipped back to cancelling."""
    b = get_owned_batch(session, owner, batch_id)
    session.execute(update(Batch).where(Batch.id == b.id, Batch.status.in_(CANCELLABLE))
                    .values(status="cancelling", cancelling_at=int(time.time())))
    session.commit()
    st.status_cache.drop(owner, batch_id)
    bell.ring(st.settings.data_dir, "batches")
    session.refresh(b)
    if b.status not in ("cancelling", "cancelled"):    # a 400: the SDK retries a 409, and this never changes
        raise APIError(400, f"Cannot cancel a batch with status '{b.status}'.", code="invalid_state")
    return render(session, b)
