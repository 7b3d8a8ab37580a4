"""Files API edge cases through a live deployment, on SQLite and PostgreSQL."""
from __future__ import annotations

import json
import socket
import urllib.parse

import httpx
import openai
import pytest

from tests.conftest import MAX_FILE_BYTES, TINY
from tests.live import chat_lines, jsonl

BOUNDARY = "bOuNdArY"


def form(*parts: tuple[str, str | None, bytes]) -> bytes:
    """A multipart/form-data body from (name, filename or None, value) parts, written by hand."""
    out = b""
    for name, filename, value in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        out += f"--{BOUNDARY}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + value + b"\r\n"
    return out + f"--{BOUNDARY}--\r\n".encode()


def post_form(deployment, body: bytes) -> httpx.Response:
    return httpx.post(f"{deployment.base_url}/files", content=body, timeout=30,
                      headers={"content-type": f"multipart/form-data; boundary={BOUNDARY}"})


def stored(deployment) -> set[str]:
    d = deployment.data_dir / "files"
    return {p.name for p in d.iterdir()} if d.exists() else set()


def test_after_cursor_keeps_files_of_the_same_second(deployment):
    c = deployment.client()
    ids: list[str] = []
    while True:           # enough uploads that at least two share a created_at second
        ids.append(c.files.create(file=("p.jsonl", jsonl(chat_lines(1, TINY))), purpose="batch").id)
        seconds = [c.files.retrieve(i).created_at for i in ids]
        if len(ids) >= 4 and len(set(seconds)) < len(seconds):
            break
    for order in ("desc", "asc"):
        seen, after = [], None
        while True:
            params = {"limit": 1, "order": order} | ({"after": after} if after else {})
            page = httpx.get(f"{deployment.base_url}/files", params=params).json()
            seen += [f["id"] for f in page["data"]]
            if not page["has_more"]:
                break
            after = page["last_id"]
        assert set(ids) <= set(seen) and len(seen) == len(set(seen)), order


@pytest.mark.parametrize("name", ['résumé "final".jsonl', "数据.jsonl", "a;b=c\\d.jsonl"])
def test_any_filename_downloads(deployment, name):
    data = jsonl(chat_lines(1, TINY))
    r = post_form(deployment, form(("purpose", None, b"batch"), ("file", name, data)))
    assert r.status_code == 200, r.text
    f = r.json()
    got = httpx.get(f"{deployment.base_url}/files/{f['id']}/content")
    assert got.status_code == 200 and got.content == data
    disp = got.headers["content-disposition"]
    assert disp.startswith("attachment;") and disp.isascii()
    if "filename*=" in disp:                      # RFC 5987
        assert urllib.parse.unquote(disp.split("filename*=utf-8''")[1]) == f["filename"]
    else:
        assert disp.split('filename="')[1][:-1] == f["filename"]
    assert "final" in f["filename"] or "数据" in f["filename"] or "a;b" in f["filename"]


@pytest.mark.parametrize("name,why", [("x" * 600 + ".jsonl", "longer than"), ("bad\x00name.jsonl", "control")])
def test_bad_filenames_are_400_before_bytes_are_stored(deployment, name, why):
    before = stored(deployment)
    r = post_form(deployment, form(("purpose", None, b"batch"), ("file", name, jsonl(chat_lines(1, TINY)))))
    assert r.status_code == 400 and why in r.json()["error"]["message"], r.text
    assert r.json()["error"]["param"] == "file"
    assert stored(deployment) <= before


def test_form_fields_are_bounded(deployment):
    data = jsonl(chat_lines(1, TINY))
    too_long = post_form(deployment, form(("purpose", None, b"batch"), ("note", None, b"n" * 10_000),
                                          ("file", "f.jsonl", data)))
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "note"
    many = post_form(deployment, form(("purpose", None, b"batch"), *((f"f{i}", None, b"v") for i in range(40)),
                                      ("file", "f.jsonl", data)))
    assert many.status_code == 400, many.text
    cut = form(("purpose", None, b"batch"), ("file", "cut.jsonl", data))[:-30]   # no closing boundary
    assert post_form(deployment, cut).status_code == 400
    assert "cut.jsonl" not in {f.filename for f in deployment.client().files.list()}


def test_chunked_upload_hits_the_limit_as_it_streams(deployment):
    """No Content-Length: the server answers 413 once the limit is crossed, while the client still sends."""
    head = form(("purpose", None, b"batch"), ("file", "big.jsonl", b""))
    head = head[:head.index(b"\r\n--" + BOUNDARY.encode() + b"--")]     # the file part, left open
    port = int(deployment.base_url.split(":")[2].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"POST /v1/files HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                  f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n\r\n".encode())
        sent = 0
        for piece in [head] + [b"y" * 16384] * ((MAX_FILE_BYTES // 16384) + 2):
            s.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            sent += len(piece)
        # The body is never finished: the answer can only come from the limit.
        s.settimeout(20)
        reply = b""
        while b"}}" not in reply and (got := s.recv(65536)):
            reply += got
    head, _, body = reply.decode(errors="replace").partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 413"), reply[:200]
    assert json.loads(body)["error"]["code"] == "file_too_large"
    assert sent < MAX_FILE_BYTES * 2


def test_expires_after_on_upload(deployment):
    c = deployment.client()
    data = jsonl(chat_lines(1, TINY))
    f = c.files.create(file=("e.jsonl", data), purpose="batch",
                       expires_after={"anchor": "created_at", "seconds": 7200})
    assert f.expires_at == f.created_at + 7200 == c.files.retrieve(f.id).expires_at
    default = c.files.create(file=("d.jsonl", data), purpose="batch")
    assert default.expires_at == default.created_at + 30 * 86400     # OpenAI: batch files expire after 30 days
    for bad in ({"anchor": "created_at", "seconds": 60}, {"anchor": "last_active_at", "seconds": 7200},
                {"anchor": "created_at", "seconds": 3 * 2592000}):
        with pytest.raises(openai.BadRequestError) as e:
            c.files.create(file=("b.jsonl", data), purpose="batch", expires_after=bad)
        assert e.value.body["param"].startswith("expires_after")


def test_ids_postgresql_cannot_hold_are_refused_not_500(deployment):
    """NUL and unpaired surrogates in an id (body, path or query) never reach the database driver."""
    base = deployment.base_url
    for bad in ("x\u0000y", "\ud80a", "a" * 100):
        r = httpx.post(f"{base}/batches", content=json.dumps({"input_file_id": bad, "endpoint": "/v1/chat/completions",
                                                              "completion_window": "24h"}),
                       headers={"content-type": "application/json"})
        assert r.status_code == 404, (bad, r.text)
    assert httpx.get(f"{base}/batches/x%00y").status_code == 400
    assert httpx.get(f"{base}/files", params={"after": "x\u0000y"}).status_code == 400
    assert httpx.get(f"{base}/files", params={"after": "file-nope"}).status_code == 404
