"""/v1/files: upload (streamed to the store), list, retrieve, content, delete."""
from __future__ import annotations

import time
from typing import Literal

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from sqlalchemy import select

from core.ids import new_id
from core.models import File
from server.deps import OwnerDep, SessionDep, StateDep
from server.errors import APIError, not_found
from server.serialize import file_obj, page
from server.upload import receive_upload

router = APIRouter(prefix="/v1/files", tags=["files"])

UPLOAD_PURPOSES = ("batch",)


def get_owned(session, owner: str, file_id: str) -> File:
    f = session.get(File, file_id)
    if f is None or f.owner != owner:
        raise not_found("file", file_id)
    return f


@router.post("")
async def create_file(request: Request, st: StateDep, owner: OwnerDep) -> dict:
    limit = st.settings.max_file_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit + 64 * 1024:
        raise APIError(413, f"File is larger than the limit of {limit} bytes.", param="file", code="file_too_large")
    file_id = new_id("file-")
    with st.store.open_writer(file_id) as writer:
        up = await receive_upload(request.headers.get("content-type", ""), request.stream(), writer, limit)
        purpose = up.fields.get("purpose")
        if purpose is None:
            raise APIError(400, "Missing required parameter: 'purpose'.", param="purpose", code="missing_required_parameter")
        if purpose not in UPLOAD_PURPOSES:
            raise APIError(400, f"Invalid purpose '{purpose}': this service accepts {list(UPLOAD_PURPOSES)}.",
                           param="purpose", code="invalid_value")
        if up.filename is None:
            raise APIError(400, "Missing required parameter: 'file'.", param="file", code="missing_required_parameter")
        await run_in_threadpool(writer.commit)
    now = int(time.time())
    row = File(id=file_id, owner=owner, filename=up.filename, purpose=purpose, bytes=up.size, created_at=now,
               expires_at=None)

    def insert() -> dict:
        with st.sessions.begin() as s:
            s.add(row)
        return file_obj(row)

    return await run_in_threadpool(insert)


@router.get("")
def list_files(session: SessionDep, owner: OwnerDep, purpose: str | None = None,
               limit: int = Query(10000, ge=1, le=10000), after: str | None = None,
               order: Literal["asc", "desc"] = "desc") -> dict:
    q = select(File).where(File.owner == owner)
    if purpose:
        q = q.where(File.purpose == purpose)
    key = (File.created_at, File.id)
    if after:
        cur = get_owned(session, owner, after)
        q = q.where(key < (cur.created_at, cur.id)) if order == "desc" else q.where(key > (cur.created_at, cur.id))
    q = q.order_by(*(k.desc() for k in key)) if order == "desc" else q.order_by(*key)
    rows = session.scalars(q.limit(limit + 1)).all()
    return page([file_obj(f) for f in rows[:limit]], len(rows) > limit)


@router.get("/{file_id}")
def retrieve_file(file_id: str, session: SessionDep, owner: OwnerDep) -> dict:
    return file_obj(get_owned(session, owner, file_id))


@router.get("/{file_id}/content")
def file_content(file_id: str, session: SessionDep, owner: OwnerDep, st: StateDep) -> StreamingResponse:
    f = get_owned(session, owner, file_id)
    if not st.store.path(f.id).exists():
        raise APIError(404, f"The content of file '{file_id}' is gone from the file store.", code="not_found")
    return StreamingResponse(st.store.iter_bytes(f.id), media_type="application/octet-stream",
                             headers={"Content-Length": str(f.bytes),
                                      "Content-Disposition": f'attachment; filename="{f.filename}"'})


@router.delete("/{file_id}")
def delete_file(file_id: str, session: SessionDep, owner: OwnerDep, st: StateDep) -> dict:
    f = get_owned(session, owner, file_id)
    session.delete(f)
    session.commit()
    st.store.delete(file_id)
    return {"id": file_id, "object": "file", "deleted": True}
