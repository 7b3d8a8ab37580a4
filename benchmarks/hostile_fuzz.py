"""One hostile tenant's requests beside another tenant's steady work, on the embedded CPU engine (SmolLM2).

Two tenants (`mallory`, `alice`) on one deployment (API, scheduler, one CPU worker; SQLite). Alice's steady
work: a short chat every `--chat-every` seconds for the whole run and one 64-line batch; first alone (her
baseline), then beside Mallory, who sends `--requests` hostile requests from `--concurrency` threads, drawn
in turn from the generators below (token ids past the vocabulary or past int32, patterns xgrammar refuses or
that blow up when compiled, huge enums, anyOf, properties and tool lists, unsupported keywords, JSON nested
100,000 deep, `n` x `top_logprobs` answers, oversized and malformed parameters), and every `--batch-every`th
of them as a line of a hostile batch file instead.

Reported (one JSON line, also appended to benchmarks/results/hostile_fuzz.jsonl): Mallory's answers by status
(every one should be a 4xx, or a 200 where the request is legal), her batches' ends (each should complete with
its bad lines as error lines, never fail with `server_error`); Alice's chats (count, 5xx, p50/p99 against her
baseline), her batch's time against her baseline, and the worker: its process alive and the engine streams that
failed (docs/design.md §12). Goals: 0 5xx for Alice, 0 worker restarts.

    PYTHONPATH=. .venv/bin/python benchmarks/hostile_fuzz.py --requests 10000
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from blendserve.core.config import SMOLLM2, Settings
from blendserve.core.served import smollm2_checkpoint
from tests.harness.deployment import Deployment, chat_lines, jsonl, wait_batch

KEYS = {"mallory": "sk-mallory-1", "alice": "sk-alice-1"}
HI = [{"role": "user", "content": "Say hi."}]


def _schema(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}}


def _pattern(p: str) -> dict:
    return _schema({"type": "object", "additionalProperties": False, "required": ["a"],
                    "properties": {"a": {"type": "string", "pattern": p}}})


def hostile() -> list[tuple[str, object]]:
    """(path, JSON body or raw bytes) of each kind of hostile request."""
    chat = {"model": SMOLLM2, "messages": HI, "max_tokens": 4}
    params = {f"p{i}": {"type": "string"} for i in range(150)}
    tools = [{"type": "function", "function": {"name": f"f{i}", "parameters": {
        "type": "object", "properties": params, "required": list(params), "additionalProperties": False}}}
        for i in range(128)]
    deep = b'{"model": "' + SMOLLM2.encode() + b'", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    return [
        ("/completions", {"model": SMOLLM2, "prompt": [1, 60000], "max_tokens": 2}),
        ("/completions", {"model": SMOLLM2, "prompt": [2**40], "max_tokens": 2}),
        ("/completions", {"model": SMOLLM2, "prompt": [-5, 3], "max_tokens": 2}),
        ("/chat/completions", {**chat, "response_format": _pattern(r"(a)\1")}),
        ("/chat/completions", {**chat, "response_format": _pattern(r"\bx\b")}),
        ("/chat/completions", {**chat, "response_format": _pattern(r"[\s\S]{0,20000}")}),
        ("/chat/completions", {**chat, "response_format": _pattern(r"(((a{1,50}){1,50}){1,50})")}),
        ("/chat/completions", {**chat, "response_format": _pattern("[")}),
        ("/chat/completions", {**chat, "response_format": _schema(
            {"type": "object", "additionalProperties": False, "required": ["a"],
             "properties": {"a": {"enum": [f"v{i}" for i in range(60_000)]}}})}),
        ("/chat/completions", {**chat, "response_format": _schema(
            {"anyOf": [{"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"],
                        "additionalProperties": False} for i in range(1000)]})}),
        ("/chat/completions", {**chat, "response_format": _schema(
            {"type": "object", "additionalProperties": False, "required": [f"k{i}" for i in range(20_000)],
             "properties": {f"k{i}": {"type": "integer"} for i in range(20_000)}})}),
        ("/chat/completions", {**chat, "response_format": _schema(
            {"type": "object", "properties": {"a": {"type": "string"}}, "allOf": [{"required": ["a"]}]})}),
        ("/chat/completions", {**chat, "tools": tools, "tool_choice": "required"}),
        ("/chat/completions", {**chat, "n": 128, "max_tokens": 2000, "logprobs": True, "top_logprobs": 20}),
        ("/chat/completions", {**chat, "max_tokens": 10**9}),
        ("/chat/completions", {**chat, "temperature": "hot", "stop": ["x"] * 100}),
        ("/chat/completions", {"model": SMOLLM2, "messages": "not a list"}),
        ("/chat/completions", {**chat, "messages": [{"role": "user", "content": "x" * 200_000}]}),
        ("/chat/completions", {**chat, "logit_bias": {"99999999": 100}}),
        ("/chat/completions", {**chat, "metadata": json.loads("{\"a\":" * 300 + "1" + "}" * 300)}),
        ("/chat/completions", deep),
    ]


def batch_line(i: int, path: str, body: object) -> dict | None:
    """A hostile request as a batch line (raw-bytes bodies have no line form)."""
    if isinstance(body, bytes):
        return None
    return {"custom_id": f"h{i}", "method": "POST", "url": f"/v1{path}", "body": body}


def alice_chats(base: str, stop: threading.Event, every: float, out: list) -> None:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEYS['alice']}"}, timeout=300) as c:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                code = c.post("/chat/completions", json={"model": SMOLLM2, "messages": HI, "max_tokens": 8}).status_code
            except httpx.HTTPError:
                code = 599
            out.append((code, time.perf_counter() - t0))
            stop.wait(every)


def alice_round(d: Deployment, seconds: float, every: float, work) -> dict:
    """Alice's chats and her 64-line batch while `work()` runs (or for `seconds` when it returns at once)."""
    chats: list = []
    stop = threading.Event()
    t = threading.Thread(target=alice_chats, args=(d.base_url, stop, every, chats), daemon=True)
    t.start()
    c = d.client(KEYS["alice"])
    f = c.files.create(file=("alice.jsonl", jsonl(chat_lines(64, SMOLLM2, max_tokens=16))), purpose="batch")
    t0 = time.time()
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    extra = work()
    b = wait_batch(c, b.id, timeout=3600, every=1.0)
    batch_s = (b.completed_at or b.failed_at or int(time.time())) - b.created_at    # the batch's own stamps
    while time.time() - t0 < seconds:
        time.sleep(0.5)
    stop.set()
    t.join()
    lat = sorted(s for code, s in chats if code == 200)
    return {"chats": len(chats), "chat_5xx": sum(code >= 500 for code, _ in chats),
            "chat_other": dict(Counter(code for code, _ in chats if code != 200)),
            "chat_p50_s": round(statistics.median(lat), 3) if lat else None,
            "chat_p99_s": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))], 3) if lat else None,
            "batch_status": b.status, "batch_completed": b.request_counts.completed,
            "batch_failed": b.request_counts.failed, "batch_s": round(batch_s, 1), **(extra or {})}


def mallory(d: Deployment, n: int, concurrency: int, batch_every: int, only: list[int] | None = None) -> dict:
    kinds = hostile()
    order = only or list(range(len(kinds)))
    statuses: Counter = Counter()
    per_kind: dict[str, Counter] = {}
    lines: list[dict] = []

    def send(i: int, kind: int, http: httpx.Client) -> None:
        path, body = kinds[kind]
        try:
            r = http.post(path, content=body, headers={"content-type": "application/json"}) \
                if isinstance(body, bytes) else http.post(path, json=body)
            code = r.status_code
        except httpx.HTTPError:
            code = 599
        statuses[code] += 1
        per_kind.setdefault(f"{kind}", Counter())[code] += 1

    http = httpx.Client(base_url=d.base_url, headers={"Authorization": f"Bearer {KEYS['mallory']}"}, timeout=300,
                        limits=httpx.Limits(max_connections=concurrency))
    with ThreadPoolExecutor(concurrency) as pool:
        for i, kind in zip(range(n), itertools.cycle(order)):
            if batch_every and i % batch_every == 0 and (line := batch_line(i, *kinds[kind])) is not None:
                lines.append(line)
                continue
            pool.submit(send, i, kind, http)
    c = d.client(KEYS["mallory"])
    ends: Counter = Counter()
    for url in sorted({line["url"] for line in lines}):        # a batch's lines share its endpoint
        same = [line for line in lines if line["url"] == url]
        for k in range(0, len(same), 200):
            f = c.files.create(file=("h.jsonl", jsonl(same[k:k + 200])), purpose="batch")
            b = c.batches.create(input_file_id=f.id, endpoint=url, completion_window="24h")
            b = wait_batch(c, b.id, timeout=3600, every=1.0)
            ends[f"{url} {b.status}" + (f" ({b.errors.data[0].code})" if b.errors and b.errors.data else "")] += 1
    http.close()
    return {"mallory_requests": sum(statuses.values()), "mallory_status": dict(statuses),
            "mallory_status_by_kind": {k: dict(v) for k, v in sorted(per_kind.items(), key=lambda kv: int(kv[0]))},
            "mallory_batch_lines": len(lines), "mallory_batches": dict(ends)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--batch-every", type=int, default=10, help="every n-th hostile request goes in a batch file")
    ap.add_argument("--chat-every", type=float, default=0.5)
    ap.add_argument("--baseline-s", type=float, default=30.0)
    ap.add_argument("--kinds", type=lambda v: [int(k) for k in v.split(",")],
                    help="only these kinds of hostile(), by index, in turn (e.g. 13 or 5,6); default: all")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/hostile_fuzz.jsonl"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bs-hostile-"))
    keys = ",".join(f"{t}:{k}" for t, k in KEYS.items())
    d = Deployment(tmp, "", f"{SMOLLM2}={smollm2_checkpoint(Settings())}", BLENDSERVE_API_KEYS=keys,
                   BLENDSERVE_POLL_INTERVAL_S="0.2", BLENDSERVE_PLAN_MAX_WAIT_S="1.0",
                   BLENDSERVE_LEASE_SECONDS="30", BLENDSERVE_CHUNK_REQUESTS="32")
    d.start_all()
    try:
        worker = d.procs["worker"]
        alone = alice_round(d, args.baseline_s, args.chat_every, lambda: None)
        beside = alice_round(d, 0, args.chat_every,
                             lambda: mallory(d, args.requests, args.concurrency, args.batch_every, args.kinds))
        log = d.log("worker", tail=None)
        row = {"requests": args.requests, "kinds": args.kinds or "all", "alone": alone, "beside": beside,
               "alice_chat_p99_ratio": round(beside["chat_p99_s"] / alone["chat_p99_s"], 2)
               if alone["chat_p99_s"] and beside["chat_p99_s"] else None,
               "alice_batch_ratio": round(beside["batch_s"] / alone["batch_s"], 2),
               "worker_alive": worker.poll() is None,
               "engine_streams_failed": log.count("engine stream failed")}
        print(json.dumps(row), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
    finally:
        d.stop()


if __name__ == "__main__":
    main()
