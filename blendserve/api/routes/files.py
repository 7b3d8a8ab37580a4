"""/v1/files: upload (streamed to the store), list, retrieve, content, delete."""
from __future__ import annotations

import time
from typing import Literal

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from sqlalchemy import delete, select

from blendserve.api import quotas
from blendserve.api.deps import OwnerDep, SessionDep, StateDep, read
from blendserve.api.errors import APIError, check_id, not_found
from blendserve.api.expiry import expires_at, form_expires_after
from blendserve.api.holds import Reserver, held
from blendserve.api.pagination import after_cursor
from blendserve.api.schemas import ERRORS, UPLOAD_BODY, FileDeleted, FileList, FileObject
from blendserve.api.serialize import file_obj, page
from blendserve.api.upload import declared_length, receive_upload
from blendserve.core.ids import new_id
from blendserve.core.models import Batch, DeletedFile, File
from blendserve.core.uploads import StorageHold

router = APIRouter(prefix="/v1/files", tags=["files"])

UPLOAD_PURPOSES = ("batch",)
UNFINISHED = ("validating", "in_progress", "finalizing", "cancelling")   # a batch that may still read its input
TOMBSTONE_S = 7 * 86400     # how long a deleted file's place in the list order is kept (list cursors)
FORM_FIELDS = {"purpose", "expires_after[anchor]", "expires_after[seconds]"}


def get_owned(session, owner: str, file_id: str, *, lock: bool = False) -> File:
    """The caller's file, or a 404 (another tenant's file is not found). `lock`: FOR UPDATE on PostgreSQL, so
    a batch create and a delete of its input file are serialized (SQLite's writers are already)."""
    f = session.get(File, check_id("file", file_id), with_for_update=lock or None)
    if f is None or f.owner != owner:
        raise not_found("file", file_id)
    return f


@router.post("", response_model=FileObject, responses=ERRORS, openapi_extra=UPLOAD_BODY)
async def create_file(request: Request, st: StateDep, owner: OwnerDep) -> dict:
    limit = st.settings.max_file_bytes
    declared = request.headers.get("content-length")     # digits only: the front door checked it
    if declared and int(declared) > limit + 64 * 1024:
        raise APIError(413, f"File is larger than the limit of {limit} bytes.", param="file", code="file_too_large")
    await read(st, quotas.check_upload, st.settings, owner)
    file_id = new_id("file-")
    async with held(Reserver(st.sessions, owner, file_id, st.settings.quota_stored_bytes)) as reserver:
        return await _store_upload(request, st, owner, file_id, limit, reserver)


async def _store_upload(request: Request, st, owner: str, file_id: str, limit: int, reserver: Reserver) -> dict:
    """The body into the store under file_id, bounded by `limit` and by what `reserver` is granted; then the
    File row, which takes the place of the upload's hold in one transaction."""
    with st.store.open_writer(file_id) as writer:
        up = await receive_upload(request.headers.get("content-type", ""), request.stream(), writer, limit,
                                  reserver, lambda: _storage_full(st, owner), expected=declared_length(request))
        unknown = sorted(set(up.fields) - FORM_FIELDS)
        if unknown:
            raise APIError(400, f"Unrecognized request argument supplied: {unknown[0][:64]!r}.",
                           param=unknown[0][:64], code="unknown_parameter")
        purpose = up.fields.get("purpose")
        if purpose is None:
            raise APIError(400, "Missing required parameter: 'purpose'.", param="purpose",
                           code="missing_required_parameter")
        if purpose not in UPLOAD_PURPOSES:
            raise APIError(400, f"Invalid purpose '{purpose}': this service accepts {list(UPLOAD_PURPOSES)}.",
                           param="purpose", code="invalid_value")
        if up.filename is None:
            raise APIError(400, "Missing required parameter: 'file'.", param="file", code="missing_required_parameter")
        lifetime = form_expires_after(up.fields, "expires_after")
        if lifetime is None and st.settings.file_expiry_seconds > 0:
            lifetime = st.settings.file_expiry_seconds    # OpenAI: purpose=batch files expire after 30 days
        await run_in_threadpool(writer.commit)
    now = int(time.time())
    row = File(id=file_id, owner=owner, filename=up.filename, purpose=purpose, bytes=up.size, created_at=now,
               expires_at=expires_at(now, lifetime), lines=up.lines)

    def insert() -> dict:
        with st.sessions.begin() as s:
            s.add(row)
            s.execute(delete(StorageHold).where(StorageHold.id == file_id))
        return file_obj(row)

    return await run_in_threadpool(insert)


def _storage_full(st, owner: str) -> APIError:
    with st.read_sessions() as s:
        return quotas.storage_full(s, st.settings, owner)


@router.get("", response_model=FileList, responses=ERRORS)
async def list_files(st: StateDep, owner: OwnerDep, purpose: str | None = None,
                     limit: int = Query(10000, ge=1, le=10000), after: str | None = None,
                     order: Literal["asc", "desc"] = "desc") -> dict:
    return await read(st, _list_files, owner, purpose, limit, after, order)


def _list_files(session, owner: str, purpose: str | None, limit: int, after: str | None, order: str) -> dict:
    q = select(File).where(File.owner == owner)
    if purpose:
        q = q.where(File.purpose == purpose)
    key = (File.created_at, File.id)
    if after:
        cur = session.get(File, check_id("file", after)) or session.get(DeletedFile, after)
        if cur is None or cur.owner != owner:
            raise not_found("file", after)
        q = q.where(after_cursor(key, (cur.created_at, cur.id), descending=order == "desc"))
    q = q.order_by(*(k.desc() for k in key)) if order == "desc" else q.order_by(*key)
    rows = session.scalars(q.limit(limit + 1)).all()
    return page([file_obj(f) for f in rows[:limit]], len(rows) > limit)


@router.get("/{file_id}", response_model=FileObject, responses=ERRORS)
async def retrieve_file(file_id: str, st: StateDep, owner: OwnerDep) -> dict:
    return await read(st, lambda s: file_obj(get_owned(s, owner, file_id)))


@router.get("/{file_id}/content", response_class=FileResponse, responses={
    200: {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}, **ERRORS})
async def file_content(file_id: str, owner: OwnerDep, st: StateDep) -> FileResponse:
    """Look the row up in a short read transaction, then stream with no session (nor connection) held.

    A download of 200 MB takes seconds to minutes; a session held that long pins
    a pooled connection (PostgreSQL) or a WAL snapshot (SQLite) for all of it.
    """
    def lookup(s):
        f = get_owned(s, owner, file_id)
        path = st.store.path(f.id)
        try:
            return f.filename, path, path.stat()
        except FileNotFoundError:
            raise APIError(404, f"The content of file '{file_id}' is gone from the file store.",
                           code="not_found") from None

    name, path, stat = await read(st, lookup)
    # FileResponse writes Content-Disposition with RFC 5987's filename* whenever the name is not plain ASCII.
    return FileResponse(path, media_type="application/octet-stream", filename=name, stat_result=stat)


@router.delete("/{file_id}", response_model=FileDeleted, responses=ERRORS)
def delete_file(file_id: str, session: SessionDep, owner: OwnerDep, st: StateDep) -> dict:
    """The input file of a batch that has not ended is kept (400 file_in_use): its requests are read from it
    until they are tokenized, and deleting it would fail them. Retention keeps such files for the same reason.
    A 400, not a 409: the SDK retries a 409, and this answer holds until the batch ends."""
    f = get_owned(session, owner, file_id, lock=True)
    running = session.execute(select(Batch.id, Batch.status).where(
        Batch.input_file_id == f.id, Batch.status.in_(UNFINISHED)).limit(1)).first()
    if running is not None:
        raise APIError(400, f"File '{file_id}' is the input of batch '{running.id}', which is {running.status}; "
                       "delete the file once the batch has ended (or cancel it).", param="file_id",
                       code="file_in_use")
    now = int(time.time())
    session.execute(delete(DeletedFile).where(DeletedFile.deleted_at < now - TOMBSTONE_S))
    session.merge(DeletedFile(id=f.id, owner=f.owner, created_at=f.created_at, deleted_at=now))
    session.delete(f)
    session.commit()
    st.store.delete(file_id)
    return {"id": file_id, "object": "file", "deleted": True}
