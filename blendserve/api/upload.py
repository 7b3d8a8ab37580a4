"""Streaming multipart/form-data parser for file uploads.

Starlette's form parser spools the whole upload before the handler sees it, so
a 200 MB limit could only be checked after 200 MB arrived, and the file would
be written twice. Here the `file` part (an Uploads API part's `data`) goes
straight into the file store as it arrives, and the size limit and the
tenant's stored-bytes quota (blendserve/api/holds.py) are enforced on the
bytes received.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from blendserve.api.errors import APIError
from blendserve.api.holds import Reserver
from blendserve.core.storage import AtomicWriter

# Everything but the file is small and bounded, so no request can make the API hold more than ~100 KB.
_MAX_FIELD = 4096          # bytes of one text field (purpose, expires_after[...])
_MAX_FIELDS = 16           # text fields per form
_MAX_HEADERS = 8192        # header bytes of one part
MAX_FILENAME = 255         # characters; checked before a byte of the file is stored


def _bad(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param=param, code="invalid_request")


def check_filename(name: str) -> str:
    if len(name) > MAX_FILENAME:
        raise APIError(400, f"The filename is longer than {MAX_FILENAME} characters.", param="file",
                       code="invalid_value")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise APIError(400, "The filename contains control characters.", param="file", code="invalid_value")
    return name


@dataclass
class Upload:
    fields: dict[str, str] = field(default_factory=dict)
    filename: str | None = None
    size: int = 0
    lines: int = 0             # of the file part: newlines, plus a last line without one
    last: bytes = b"\n"
    complete: bool = False     # the closing boundary arrived (a cut-off body must not store a partial file)


class _Form:
    """multipart's callbacks for one body: the `file` part streams to the writer, counted and bounded; other
    parts are buffered as text fields, each bounded, as are the parts' number and headers."""

    def __init__(self, up: Upload, writer: AtomicWriter, limit: int, over_quota: Callable[[], Exception] | None,
                 file_field: str) -> None:
        self.up, self.writer, self.limit, self.over_quota, self.file = up, writer, limit, over_quota, file_field
        self.quota_left: int | None = None      # the bytes the tenant's hold covers (None: no quota)
        self.part: dict = {}
        self.n_parts = 0

    def callbacks(self) -> dict[str, Callable]:
        return {"on_part_begin": self.on_part_begin, "on_header_field": self.on_header_field,
                "on_header_value": self.on_header_value, "on_header_end": self.on_header_end,
                "on_headers_finished": self.on_headers_finished, "on_part_data": self.on_part_data,
                "on_part_end": self.on_part_end, "on_end": lambda: setattr(self.up, "complete", True)}

    def on_part_begin(self) -> None:
        self.n_parts += 1
        if self.n_parts > _MAX_FIELDS + 1:
            raise _bad(f"The form has more than {_MAX_FIELDS + 1} parts.")
        self.part = {"headers": {}, "name": None, "buf": bytearray(), "header_field": b"", "header_value": b"",
                     "header_bytes": 0}

    def _header_bytes(self, n: int) -> None:
        self.part["header_bytes"] += n
        if self.part["header_bytes"] > _MAX_HEADERS:
            raise _bad(f"A form part has more than {_MAX_HEADERS} bytes of headers.")

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_bytes(end - start)
        self.part["header_field"] += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_bytes(end - start)
        self.part["header_value"] += data[start:end]

    def on_header_end(self) -> None:
        self.part["headers"][self.part["header_field"].lower()] = self.part["header_value"]
        self.part["header_field"], self.part["header_value"] = b"", b""

    def on_headers_finished(self) -> None:
        part, up = self.part, self.up
        _, disp = parse_options_header(part["headers"].get(b"content-disposition", b""))
        part["name"] = disp.get(b"name", b"").decode(errors="replace")
        if part["name"] == self.file:
            if up.filename is not None:
                raise _bad(f"The form has more than one '{self.file}' part.", self.file)
            up.filename = check_filename(disp.get(b"filename", b"upload.jsonl").decode(errors="replace"))
        elif part["name"] in up.fields:
            raise _bad(f"The form field '{part['name'][:64]}' appears twice.", part["name"][:64])

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        part, up = self.part, self.up
        if part["name"] != self.file:
            part["buf"] += data[start:end]
            if len(part["buf"]) > _MAX_FIELD:
                raise _bad(f"Form field '{part['name'][:64]}' is longer than {_MAX_FIELD} bytes.", part["name"][:64])
            return
        up.size += end - start
        if up.size > self.limit:
            raise APIError(413, f"File is larger than the limit of {self.limit} bytes.", param=self.file,
                           code="file_too_large")
        if self.quota_left is not None and up.size > self.quota_left and self.over_quota is not None:
            raise self.over_quota()
        self.writer.write(data[start:end])
        if end > start:
            up.lines += data.count(b"\n", start, end)
            up.last = data[end - 1:end]

    def on_part_end(self) -> None:
        if self.part["name"] and self.part["name"] != self.file:
            self.up.fields[self.part["name"]] = self.part["buf"].decode(errors="replace")


async def receive_upload(content_type: str, body: AsyncIterator[bytes], writer: AtomicWriter, limit: int,
                         reserver: Reserver | None = None, over_quota: Callable[[], Exception] | None = None,
                         file_field: str = "file", expected: int = 0) -> Upload:
    """Parse the form, writing the `file_field` part to `writer`; other parts become text fields. Past `limit`
    bytes of file a 413. With a quota, `reserver` grows the tenant's hold before each chunk is parsed (a chunk
    carries at most its own length of file bytes), and first by the body's declared length (`expected`), so that
    of concurrent uploads the first ones take what is left whole rather than all of them a share too small to
    finish; past what it was granted, the error `over_quota` makes."""
    ctype, params = parse_options_header(content_type)
    if ctype != b"multipart/form-data" or b"boundary" not in params:
        raise APIError(400, "Expected a multipart/form-data body with 'file' and 'purpose'.", code="invalid_request")
    up = Upload()
    form = _Form(up, writer, limit, over_quota, file_field)
    parser = MultipartParser(params[b"boundary"], form.callbacks())
    try:
        if reserver is not None and reserver.active and expected:
            form.quota_left = await reserver.ensure(min(expected, limit))
        async for chunk in body:
            if reserver is not None and reserver.active:
                form.quota_left = await reserver.ensure(min(up.size + len(chunk), limit))
            parser.write(chunk)
        parser.finalize()
    except MultipartParseError as e:
        raise _bad(f"The multipart/form-data body is malformed: {e}") from None
    if not up.complete:
        raise _bad("The multipart/form-data body ended before its closing boundary.")
    up.lines += up.size > 0 and up.last != b"\n"
    return up


def declared_length(request: Request) -> int:
    """The body's Content-Length (digits only: the front door checked it), 0 when it streams without one."""
    declared = request.headers.get("content-length")
    return int(declared) if declared else 0
