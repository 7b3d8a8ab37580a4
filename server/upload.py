"""Streaming multipart/form-data parser for file uploads.

Starlette's form parser spools the whole upload before the handler sees it, so
a 200 MB limit could only be checked after 200 MB arrived, and the file would
be written twice. Here the `file` part goes straight into the file store as it
arrives, and the size limit is enforced on the bytes received.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import AsyncIterator

from python_multipart.multipart import MultipartParser, parse_options_header

from core.storage import AtomicWriter
from server.errors import APIError

_MAX_FIELD = 64 * 1024


@dataclass
class Upload:
    fields: dict[str, str] = field(default_factory=dict)
    filename: str | None = None
    size: int = 0


async def receive_upload(content_type: str, body: AsyncIterator[bytes], writer: AtomicWriter, limit: int) -> Upload:
    """Parse the form, writing the `file` part to `writer`; other parts become text fields."""
    ctype, params = parse_options_header(content_type)
    if ctype != b"multipart/form-data" or b"boundary" not in params:
        raise APIError(400, "Expected a multipart/form-data body with 'file' and 'purpose'.", code="invalid_request")
    up = Upload()
    part: dict = {}

    def on_part_begin() -> None:
        part.clear()
        part.update(headers={}, name=None, buf=bytearray(), header_field=b"", header_value=b"")

    def on_header_field(data: bytes, start: int, end: int) -> None:
        part["header_field"] += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        part["header_value"] += data[start:end]

    def on_header_end() -> None:
        part["headers"][part["header_field"].lower()] = part["header_value"]
        part["header_field"], part["header_value"] = b"", b""

    def on_headers_finished() -> None:
        _, disp = parse_options_header(part["headers"].get(b"content-disposition", b""))
        part["name"] = disp.get(b"name", b"").decode()
        if part["name"] == "file":
            up.filename = disp.get(b"filename", b"upload.jsonl").decode(errors="replace")

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if part["name"] == "file":
            up.size += end - start
            if up.size > limit:
                raise APIError(413, f"File is larger than the limit of {limit} bytes.", param="file",
                               code="file_too_large")
            writer.write(data[start:end])
        else:
            part["buf"] += data[start:end]
            if len(part["buf"]) > _MAX_FIELD:
                raise APIError(400, f"Form field '{part['name']}' is too long.", param=part["name"])

    def on_part_end() -> None:
        if part["name"] and part["name"] != "file":
            up.fields[part["name"]] = part["buf"].decode(errors="replace")

    parser = MultipartParser(params[b"boundary"], {
        "on_part_begin": on_part_begin, "on_header_field": on_header_field, "on_header_value": on_header_value,
        "on_header_end": on_header_end, "on_headers_finished": on_headers_finished,
        "on_part_data": on_part_data, "on_part_end": on_part_end,
    })
    async for chunk in body:
        parser.write(chunk)
    parser.finalize()
    return up
