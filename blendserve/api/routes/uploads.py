"""/v1/uploads: OpenAI's Uploads API, a file of up to BLENDSERVE_UPLOAD_MAX_BYTES sent in parts of up to 64 MB.

Create declares the file (name, purpose, bytes); parts arrive in any order,
in parallel; complete names them in order and gets the File, usable as a
batch's input like any upload. The SDK's `client.uploads.upload_file_chunked`
drives it unmodified. The work apart from HTTP is in blendserve/api/uploads.py.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from blendserve.api import quotas
from blendserve.api import uploads as ups
from blendserve.api.deps import OwnerDep, StateDep, read
from blendserve.api.errors import APIError
from blendserve.api.expiry import ExpiresAfter, expires_at
from blendserve.api.holds import Reserver, held
from blendserve.api.routes.files import _storage_full
from blendserve.api.schemas import ERRORS, FileObject
from blendserve.api.upload import MAX_FILENAME, declared_length, receive_upload
from blendserve.core.ids import new_id
from blendserve.core.models import File
from blendserve.core.uploads import Upload

SWEEP_EVERY_S = 60.0
log = logging.getLogger(__name__)


async def _sweeper(st) -> None:
    """End expired uploads and delete their parts: their bytes would otherwise stay on disk for good."""
    while True:
        try:
            await run_in_threadpool(ups.sweep_expired, st.sessions, st.store)
        except Exception:      # a database away for a moment: the next sweep does the work
            log.exception("sweeping expired uploads failed")
        await asyncio.sleep(SWEEP_EVERY_S)


@asynccontextmanager
async def _expiry(app) -> AsyncIterator[None]:
    """Every API process ends expired uploads once a minute while it runs (their rows are claimed with SKIP
    LOCKED, so replicas share the work)."""
    task = asyncio.create_task(_sweeper(app.state.blend))
    try:
        yield
    finally:
        task.cancel()


router = APIRouter(prefix="/v1/uploads", tags=["uploads"], lifespan=_expiry)
PLAIN = r"^[^\x00-\x1f\x7f]*$"      # no control characters (PostgreSQL refuses NUL in text)


class CreateUpload(BaseModel):
    """The app sets `bytes`' maximum in the schema to BLENDSERVE_UPLOAD_MAX_BYTES."""
    model_config = ConfigDict(extra="forbid")

    filename: str = Field(max_length=MAX_FILENAME, pattern=PLAIN)
    purpose: Literal["batch"]
    bytes: int = Field(ge=1)
    mime_type: str = Field(min_length=1, max_length=128, pattern=PLAIN)
    expires_after: ExpiresAfter | None = None


class UploadObject(BaseModel):
    id: str
    object: Literal["upload"]
    bytes: int
    created_at: int
    expires_at: int
    filename: str
    purpose: str
    status: Literal["pending", "completed", "cancelled", "expired"]
    file: FileObject | None


class UploadPartObject(BaseModel):
    id: str
    object: Literal["upload.part"]
    created_at: int
    upload_id: str


PART_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["data"], "additionalProperties": False,
    "properties": {"data": {"type": "string", "format": "binary", "maxLength": ups.PART_MAX_BYTES}}}}}}}


class CompleteUpload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    part_ids: list[str] = Field(max_length=ups.MAX_PARTS)
    md5: str | None = Field(default=None, max_length=64)


@router.post("", response_model=UploadObject, responses=ERRORS)
async def create_upload(req: CreateUpload, st: StateDep, owner: OwnerDep) -> dict:
    if req.bytes > st.settings.upload_max_bytes:
        raise APIError(413, f"The upload's {req.bytes} bytes are more than the limit of "
                       f"{st.settings.upload_max_bytes} bytes.", param="bytes", code="file_too_large")
    ups.check_space(st.store, req.bytes)
    left = await read(st, quotas.check_upload, st.settings, owner)
    if left is not None and req.bytes > left:
        raise await read(st, quotas.storage_full, st.settings, owner)
    now = int(time.time())
    u = Upload(id=new_id("upload_"), owner=owner, filename=req.filename, purpose=req.purpose,
               mime_type=req.mime_type, bytes=req.bytes, created_at=now, expires_at=now + ups.UPLOAD_TTL_S,
               status="pending", file_expires_after_s=req.expires_after.seconds if req.expires_after else None)

    def insert() -> dict:
        with st.sessions.begin() as s:
            s.add(u)
        return ups.upload_obj(u)

    return await run_in_threadpool(insert)


@router.post("/{upload_id}/parts", response_model=UploadPartObject, responses=ERRORS, openapi_extra=PART_BODY)
async def add_part(upload_id: str, request: Request, st: StateDep, owner: OwnerDep) -> dict:
    u = await read(st, ups.get_owned_upload, owner, upload_id)
    ups.check_pending(u)
    part_id = new_id("part_")
    reserver = Reserver(st.sessions, owner, part_id, st.settings.quota_stored_bytes, lambda: u.expires_at)
    async with held(reserver):
        with st.store.open_writer(part_id) as writer:
            up = await receive_upload(request.headers.get("content-type", ""), request.stream(), writer,
                                      ups.PART_MAX_BYTES, reserver, lambda: _storage_full(st, owner), "data",
                                      declared_length(request))
            unknown = sorted(up.fields)
            if unknown:
                raise APIError(400, f"Unrecognized request argument supplied: {unknown[0][:64]!r}.",
                               param=unknown[0][:64], code="unknown_parameter")
            if up.filename is None:
                raise APIError(400, "Missing required parameter: 'data'.", param="data",
                               code="missing_required_parameter")
            await run_in_threadpool(writer.commit)
        return await run_in_threadpool(ups.add_part, st.sessions, st.store, owner, u.id, part_id, up.size,
                                       reserver.active)


@router.post("/{upload_id}/complete", response_model=UploadObject, responses=ERRORS)
async def complete_upload(upload_id: str, req: CompleteUpload, st: StateDep, owner: OwnerDep) -> dict:
    def plan(s) -> tuple[Upload, list]:
        u = ups.get_owned_upload(s, owner, upload_id)
        ups.check_pending(u)
        return u, ups.ordered_parts(s, u, req.part_ids)

    u, parts = await read(st, plan)
    await read(st, quotas.check_files, st.settings, owner)
    ups.check_space(st.store, u.bytes)
    file_id = new_id("file-")
    made = await run_in_threadpool(ups.assemble, st.store, file_id, parts, req.md5)
    return await run_in_threadpool(_finish, st, owner, upload_id, file_id, made)


def _finish(st, owner: str, upload_id: str, file_id: str, made: ups.Assembled) -> dict:
    """The File row in place of the upload's parts and holds, in one transaction; the parts' bytes deleted
    after it commits. An upload completed or cancelled meanwhile keeps its state and the copy is deleted."""
    try:
        with st.sessions.begin() as s:
            u = ups.get_owned_upload(s, owner, upload_id, lock=True)
            ups.check_pending(u)
            lifetime = u.file_expires_after_s or (st.settings.file_expiry_seconds or None)
            now = int(time.time())
            f = File(id=file_id, owner=owner, filename=u.filename, purpose=u.purpose, bytes=made.size,
                     created_at=now, expires_at=expires_at(now, lifetime), lines=made.lines)
            s.add(f)
            gone = ups.end_upload(s, u, "completed", file_id)
    except BaseException:
        st.store.delete(file_id)
        raise
    for pid in gone:
        st.store.delete(pid)
    return ups.upload_obj(u, f)


@router.post("/{upload_id}/cancel", response_model=UploadObject, responses=ERRORS)
async def cancel_upload(upload_id: str, st: StateDep, owner: OwnerDep) -> dict:
    def cancel() -> dict:
        with st.sessions.begin() as s:
            u = ups.get_owned_upload(s, owner, upload_id, lock=True)
            if u.status != "pending":
                raise APIError(400, f"Upload '{u.id}' is {u.status}; only a pending upload can be cancelled.",
                               param="upload_id", code="invalid_state")
            gone = ups.end_upload(s, u, "cancelled")
        for pid in gone:
            st.store.delete(pid)
        return ups.upload_obj(u)

    return await run_in_threadpool(cancel)
