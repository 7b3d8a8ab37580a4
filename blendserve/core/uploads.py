"""Rows of the Uploads API (a file sent in parts) and of the stored bytes reserved while they arrive.

Apart from blendserve/core/models.py: only the API reads and writes them; the
scheduler and workers see the File a completed upload becomes, nothing else.
"""
from __future__ import annotations

from sqlalchemy import BigInteger, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from blendserve.core.models import Base


class Upload(Base):
    """status: pending -> completed | cancelled; a pending upload past expires_at reads as expired."""

    __tablename__ = "uploads"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    filename: Mapped[str] = mapped_column(String(512))
    purpose: Mapped[str] = mapped_column(String(32))
    mime_type: Mapped[str] = mapped_column(String(128))
    bytes: Mapped[int] = mapped_column(BigInteger)           # declared at create; complete checks the parts add up
    created_at: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[int] = mapped_column(Integer, index=True)   # index: the sweep of expired uploads
    status: Mapped[str] = mapped_column(String(16))
    file_id: Mapped[str | None] = mapped_column(String(64))
    file_expires_after_s: Mapped[int | None] = mapped_column(Integer)   # expires_after of the File it becomes


class UploadPart(Base):
    """One part's bytes, stored in the file store under the part's id until the upload completes or ends."""

    __tablename__ = "upload_parts"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    upload_id: Mapped[str] = mapped_column(String(64), index=True)
    bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[int] = mapped_column(Integer)


class StorageHold(Base):
    """Stored bytes a tenant holds beyond its files: an upload's body while it streams (id: the file's id), a
    part while it streams and until its upload ends (id: the part's id). The quota counts files plus the holds
    not expired (a process that died mid-upload frees its hold at expires_at)."""

    __tablename__ = "storage_holds"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    bytes: Mapped[int] = mapped_column(BigInteger)
    expires_at: Mapped[int] = mapped_column(Integer, index=True)
