"""`blendserve submit | status | cancel`: the batch workflow from a shell, through the `openai` package.

The commands speak only the OpenAI Batch API, so the same commands drive
BlendServe or OpenAI itself: the base URL and key come from `--base-url` /
`--api-key` or, as the SDK reads them, `OPENAI_BASE_URL` / `OPENAI_API_KEY`.
Without either, the embedded default at http://127.0.0.1:8000/v1 is used.

`submit --follow` prints the batch's finished lines on stdout as they come, as
its output and error files hold them, from BlendServe's
`GET /v1/batches/{id}/output` (docs/batch-api.md): it keeps the cursor of
the last line it printed and, if the API goes away (a restart), asks again
from it, so every line is printed exactly once.

The ETA is BlendServe's own (`/dashboard/batches/{id}`: the batch's observed
rate, or the planner's estimate before enough of it ran); against a server
without that route (OpenAI) it is extrapolated here from the request counts.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
FINAL = ("completed", "failed", "expired", "cancelled")
CURSOR, DONE = "X-BlendServe-Cursor", "X-BlendServe-Done"     # GET /v1/batches/{id}/output's headers
FOLLOW_PATIENCE_S = 300.0      # how long --follow keeps asking an API that does not answer (a restart)


class FollowError(Exception):
    """The server refused the output route (an unknown batch, a server without it)."""


def _client(args: argparse.Namespace):
    from openai import OpenAI

    return OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=5)


def _tokens(batch) -> int:
    usage = getattr(batch, "usage", None)
    return int(getattr(usage, "total_tokens", 0) or 0) if usage is not None else 0


def progress(client, batch_id: str) -> dict | None:
    """BlendServe's progress of one batch (tokens/s, eta_s, eta_source); None where the server has no such route."""
    import httpx

    root = str(client.base_url).rstrip("/").removesuffix("/v1")
    try:
        r = httpx.get(f"{root}/dashboard/batches/{batch_id}", timeout=5,
                      headers={"Authorization": f"Bearer {client.api_key}"})
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _eta(p: dict | None) -> str:
    if p and p.get("eta_source") == "overdue":
        return "ETA overdue (the plan's estimate passed)"
    if not p or p.get("eta_s") is None:
        return "ETA -"
    return f"ETA {_clock(p['eta_s'])}" + (" (estimate)" if p.get("eta_source") == "estimate" else "")


def _summary(batch, p: dict | None = None) -> str:
    c = batch.request_counts
    done = f"{c.completed}/{c.total} completed, {c.failed} failed" if c else "no counts yet"
    line = f"{batch.id}  {batch.status:<11} {done}"
    if batch.status == "in_progress" and p:
        line += f", {_rate(p)}, {_eta(p)}"
    errors = getattr(getattr(batch, "errors", None), "data", None)
    if batch.status == "failed" and errors:       # why, from the Batch object itself: no second request
        e = errors[0]
        where = f" (line {e.line})" if e.line is not None else ""
        line += f"; {e.code}{where}: {e.message}" + (f"; and {len(errors) - 1} more" if len(errors) > 1 else "")
    return line


def _rate(p: dict) -> str:
    """Tokens/s, or the phase a running batch is in before its first result (the dashboard's words)."""
    if p.get("phase") not in (None, "running"):
        return p["phase"]
    return f"{p['tokens_per_s']:,.0f} tok/s"


def wait(client, batch, poll_s: float, out=sys.stderr):
    """Poll until the batch ends, drawing completed/total, tokens/s and the ETA as a tqdm bar."""
    from tqdm import tqdm

    bar = tqdm(total=max(batch.request_counts.total, 1) if batch.request_counts else 1, unit="req",
               desc=batch.status, file=out, dynamic_ncols=True,
               bar_format="{desc}{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]")
    t0, tok0, first = time.time(), _tokens(batch), None
    try:
        while batch.status not in FINAL:
            time.sleep(poll_s)
            batch = client.batches.retrieve(batch.id)
            c = batch.request_counts
            done = c.completed + c.failed if c else 0
            if c and c.total:
                bar.total = c.total
                bar.n = done
            p = progress(client, batch.id)
            if p is None:                    # not BlendServe: extrapolate the counts seen here
                first = first or (time.time(), done)
                seen = done - first[1]
                rate = (_tokens(batch) - tok0) / max(time.time() - t0, 1e-9)
                eta = (time.time() - first[0]) * (bar.total - done) / seen if seen > 0 else None
                p = {"tokens_per_s": rate, "eta_s": eta if batch.status == "in_progress" else None}
            bar.set_description(batch.status)
            bar.set_postfix_str(f"{_rate(p)}, {_eta(p)}")
            bar.refresh()
    finally:
        bar.close()
    return batch


def follow(client, batch_id: str, out=sys.stdout, poll_s: float = 1.0, limit: int = 1000,
           patience_s: float = FOLLOW_PATIENCE_S) -> int:
    """Write the batch's finished lines to `out` as they come, until the batch has ended and all are written;
    returns how many. A response's cursor is kept only once its whole body is written, and a refused
    connection or a 5xx is asked again from the same cursor: an API restart repeats and skips nothing."""
    import httpx

    url = f"{str(client.base_url).rstrip('/')}/batches/{batch_id}/output"
    cursor, written, failing_since = 0, 0, None
    with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {client.api_key}"}) as http:
        while True:
            try:
                r = http.get(url, params={"after": cursor, "limit": limit})
                if r.status_code >= 500:
                    raise httpx.HTTPStatusError(f"{r.status_code}", request=r.request, response=r)
            except (httpx.TransportError, httpx.HTTPStatusError):
                failing_since = failing_since or time.time()
                if time.time() - failing_since > patience_s:
                    raise
                time.sleep(poll_s)
                continue
            failing_since = None
            if r.status_code != 200 or CURSOR not in r.headers:
                raise FollowError(f"{url}: {r.status_code} {r.text[:300]}")
            out.write(r.text)
            out.flush()
            written += r.text.count("\n")
            cursor = int(r.headers[CURSOR])
            if r.headers.get(DONE) == "true":
                return written
            if len(r.content) == 0:
                time.sleep(poll_s)


def _download(client, file_id: str | None, dest: str | None, what: str) -> None:
    if not file_id or not dest:
        return
    Path(dest).write_bytes(client.files.content(file_id).content)
    print(f"{what}: {dest}", file=sys.stderr)


def cmd_submit(args: argparse.Namespace) -> int:
    client = _client(args)
    with open(args.file, "rb") as f:
        uploaded = client.files.create(file=f, purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=args.endpoint,
                                  completion_window=args.completion_window,
                                  metadata=dict(kv.split("=", 1) for kv in args.metadata) or None)
    print(batch.id, file=sys.stderr if args.follow else sys.stdout)    # --follow: stdout holds only JSONL
    if args.follow:
        try:
            follow(client, batch.id, poll_s=args.poll)
        except FollowError as e:
            print(f"blendserve submit: {e}", file=sys.stderr)
            return 2
        batch = client.batches.retrieve(batch.id)
    elif not args.wait:
        return 0
    else:
        batch = wait(client, batch, args.poll)
    print(_summary(batch), file=sys.stderr)
    for e in (batch.errors.data if batch.errors and batch.errors.data else []):
        print(f"  line {e.line}: {e.code}: {e.message}", file=sys.stderr)
    _download(client, batch.output_file_id, args.output, "output")
    _download(client, batch.error_file_id, args.errors, "errors")
    return 0 if batch.status == "completed" else 1


def cmd_status(args: argparse.Namespace) -> int:
    client = _client(args)
    batches = [client.batches.retrieve(args.batch_id)] if args.batch_id else client.batches.list(limit=args.limit).data
    for b in batches:
        p = progress(client, b.id) if b.status == "in_progress" else None
        print(json.dumps({**b.model_dump(), **({"progress": p} if p else {})}, indent=2) if args.json
              else _summary(b, p))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    print(_summary(_client(args).batches.cancel(args.batch_id)))
    return 0


def main(cmd: str, argv: list[str], env: Mapping[str, str]) -> int:
    """`blendserve submit|status|cancel`; ``env``: the entry point's environment, for the SDK's two variables."""
    p = argparse.ArgumentParser(prog=f"blendserve {cmd}", description=__doc__.split("\n")[0])
    p.add_argument("--base-url", default=env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
                   help=f"API base URL (default $OPENAI_BASE_URL, else {DEFAULT_BASE_URL})")
    p.add_argument("--api-key", default=env.get("OPENAI_API_KEY") or "unused",
                   help="API key (default $OPENAI_API_KEY)")
    if cmd == "submit":
        p.add_argument("file", help="an OpenAI batch input file (JSONL)")
        p.add_argument("--endpoint", default="/v1/chat/completions")
        p.add_argument("--completion-window", default="24h")
        p.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE")
        p.add_argument("--wait", action="store_true", help="show progress until the batch ends, then download")
        p.add_argument("--follow", action="store_true", help="print the finished lines (JSONL, as the output and "
                       "error files hold them) on stdout as they come, until the batch ends; the batch id on stderr")
        p.add_argument("--output", help="with --wait or --follow: where to write the output file")
        p.add_argument("--errors", help="with --wait or --follow: where to write the error file")
        p.add_argument("--poll", type=float, default=1.0, help="seconds between status polls")
        p.set_defaults(fn=cmd_submit)
    elif cmd == "status":
        p.add_argument("batch_id", nargs="?", help="one batch (default: the most recent ones)")
        p.add_argument("--limit", type=int, default=20)
        p.add_argument("--json", action="store_true", help="print the whole batch objects")
        p.set_defaults(fn=cmd_status)
    else:
        p.add_argument("batch_id")
        p.set_defaults(fn=cmd_cancel)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except Exception as e:   # the SDK's errors carry the API's message: show it, not a traceback
        from openai import OpenAIError

        if not isinstance(e, (OpenAIError, OSError)):
            raise
        print(f"blendserve {cmd}: {e}", file=sys.stderr)
        return 2
