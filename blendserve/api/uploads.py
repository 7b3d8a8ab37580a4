"""The Uploads API's work apart from HTTP: a part into the store, the parts into one File, ending an upload.

A part is stored under its own id in the file store as it arrives, bounded by
PART_MAX_BYTES and by the tenant's stored-bytes hold (blendserve/api/holds.py).
Complete copies the named parts, in the order named, into one new file in
1 MB reads (memory stays flat whatever the upload's size), counting its
lines and its md5 as it goes, as a normal upload counts lines; the File row
then takes the place of the parts and their holds in one transaction.
"""
from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import dataclass

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from blendserve.api import holds
from blendserve.api.errors import APIError, check_id, not_found
from blendserve.api.serialize import file_obj
from blendserve.core.models import File
from blendserve.core.storage import FileStore
from blendserve.core.uploads import StorageHold, Upload, UploadPart

PART_MAX_BYTES = 64 * 1024 * 1024     # OpenAI's bound on one part
UPLOAD_TTL_S = 3600                   # an upload not completed within an hour expires, as at OpenAI
COPY_CHUNK = 1 << 20
SWEEP_BATCH = 100                     # expired uploads ended per sweep
MAX_PARTS = 10_000                    # parts of one upload (8 GiB in parts of 1 MB would be 8192)


def upload_obj(u: Upload, f: File | None = None) -> dict:
    status = "expired" if u.status == "pending" and u.expires_at <= time.time() else u.status
    return {"id": u.id, "object": "upload", "bytes": u.bytes, "created_at": u.created_at,
            "expires_at": u.expires_at, "filename": u.filename, "purpose": u.purpose, "status": status,
            "file": file_obj(f) if f is not None else None}


def part_obj(p: UploadPart) -> dict:
    return {"id": p.id, "object": "upload.part", "created_at": p.created_at, "upload_id": p.upload_id}


def get_owned_upload(session: Session, owner: str, upload_id: str, *, lock: bool = False) -> Upload:
    """The caller's upload, or a 404 (another tenant's is not found); `lock`: FOR UPDATE on PostgreSQL."""
    u = session.get(Upload, check_id("upload", upload_id), with_for_update=lock or None)
    if u is None or u.owner != owner:
        raise not_found("upload", upload_id)
    return u


def check_pending(u: Upload) -> None:
    status = upload_obj(u)["status"]
    if status != "pending":
        raise APIError(400, f"Upload '{u.id}' is {status}; only a pending upload takes parts or completes.",
                       param="upload_id", code="invalid_state")


def check_space(store: FileStore, n: int) -> None:
    free = shutil.disk_usage(store.root).free
    if n > free:
        raise APIError(507, f"The upload's {n} bytes are more than the file store has free ({free} bytes).",
                       param="bytes", code="insufficient_storage", type="server_error")


def add_part(sessions: sessionmaker[Session], store: FileStore, owner: str, upload_id: str, part_id: str,
             size: int, quota: bool) -> dict:
    """Record a stored part: refused (and its bytes deleted) if the upload ended meanwhile or the parts would
    pass the declared bytes; with a quota, the part's hold shrinks to its size and lasts as long as the upload."""
    try:
        with sessions.begin() as s:
            u = get_owned_upload(s, owner, upload_id, lock=True)
            check_pending(u)
            n, have = s.execute(select(func.count(), func.coalesce(func.sum(UploadPart.bytes), 0))
                                .where(UploadPart.upload_id == u.id)).one()
            if size == 0:
                raise APIError(400, "The part is empty.", param="data", code="invalid_value")
            if n >= MAX_PARTS:
                raise APIError(400, f"Upload '{u.id}' has {MAX_PARTS} parts, the most one upload takes.",
                               param="data", code="invalid_value")
            if have + size > u.bytes:
                raise APIError(400, f"This part's {size} bytes take upload '{u.id}' to {have + size} bytes, past "
                               f"the {u.bytes} bytes declared at create.", param="data", code="invalid_value")
            part = UploadPart(id=part_id, upload_id=u.id, bytes=size, created_at=int(time.time()))
            s.add(part)
            if quota:
                s.execute(update(StorageHold).where(StorageHold.id == part_id)
                          .values(bytes=size, expires_at=u.expires_at))
    except BaseException:
        store.delete(part_id)
        raise
    return part_obj(part)


@dataclass
class Assembled:
    size: int
    lines: int
    md5: str


def assemble(store: FileStore, file_id: str, parts: list[UploadPart], md5: str | None) -> Assembled:
    """Copy the parts in order into file_id, streaming; a wrong md5 stores nothing (400)."""
    digest, size, lines, last = hashlib.md5(usedforsecurity=False), 0, 0, b"\n"
    with store.open_writer(file_id) as writer:
        for p in parts:
            try:
                fh = store.open(p.id)
            except FileNotFoundError:          # a cancel or the expiry sweep ended the upload meanwhile
                raise APIError(400, f"Part '{p.id}' is gone: its upload was cancelled or expired meanwhile.",
                               param="part_ids", code="invalid_state") from None
            with fh:
                while chunk := fh.read(COPY_CHUNK):
                    writer.write(chunk)
                    digest.update(chunk)
                    size, lines, last = size + len(chunk), lines + chunk.count(b"\n"), chunk[-1:]
        if md5 is not None and md5.strip().lower() != digest.hexdigest():
            raise APIError(400, f"The md5 of the assembled file is {digest.hexdigest()}, not {md5[:64]!r}.",
                           param="md5", code="invalid_value")
        writer.commit()
    return Assembled(size, lines + (size > 0 and last != b"\n"), digest.hexdigest())


def ordered_parts(session: Session, u: Upload, part_ids: list[str]) -> list[UploadPart]:
    """The named parts of u, in the order named; 400 for a part not of this upload, named twice, or parts
    whose bytes do not add up to the bytes declared."""
    if not part_ids:
        raise APIError(400, "part_ids is empty.", param="part_ids", code="invalid_value")
    if len(set(part_ids)) != len(part_ids):
        raise APIError(400, "part_ids names a part more than once.", param="part_ids", code="invalid_value")
    have = {p.id: p for p in session.scalars(select(UploadPart).where(UploadPart.upload_id == u.id))}
    missing = [i for i in part_ids if i not in have]
    if missing:
        raise APIError(400, f"Part '{missing[0][:64]}' is not a part of upload '{u.id}'.", param="part_ids",
                       code="invalid_value")
    parts = [have[i] for i in part_ids]
    total = sum(p.bytes for p in parts)
    if total != u.bytes:
        raise APIError(400, f"The parts hold {total} bytes; upload '{u.id}' was created for {u.bytes} bytes.",
                       param="part_ids", code="invalid_value")
    return parts


def end_upload(s: Session, u: Upload, status: str, file_id: str | None = None) -> list[str]:
    """Mark u ended and delete its part rows and holds (in the caller's transaction); returns the part ids,
    whose stored bytes the caller deletes once the transaction commits."""
    ids = list(s.scalars(select(UploadPart.id).where(UploadPart.upload_id == u.id)))
    u.status, u.file_id = status, file_id
    s.execute(delete(UploadPart).where(UploadPart.upload_id == u.id))
    if ids:
        s.execute(delete(StorageHold).where(StorageHold.id.in_(ids)))
    return ids


def sweep_expired(sessions: sessionmaker[Session], store: FileStore) -> int:
    """End pending uploads past expires_at (their parts deleted) and drop expired holds; returns how many."""
    now = int(time.time())
    with sessions.begin() as s:
        rows = s.scalars(select(Upload).where(Upload.status == "pending", Upload.expires_at <= now)
                         .limit(SWEEP_BATCH).with_for_update(skip_locked=True)).all()
        gone = [pid for u in rows for pid in end_upload(s, u, "expired")]
        holds.sweep(s, now)
    for pid in gone:
        store.delete(pid)
    return len(rows)
