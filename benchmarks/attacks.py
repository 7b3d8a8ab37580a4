"""A hostile tenant's seven attacks (benchmarks/seven_attacks.py runs them): each an `Attack` whose `run` goes on
until told to halt and returns what the hostile tenant got back, by status."""
from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import httpx
import openai

from benchmarks.hostile_fuzz import KEYS
from blendserve.core.config import SMOLLM2
from tests.harness.deployment import jsonl, read_lines, wait_batch

AUTH = {"Authorization": f"Bearer {KEYS['mallory']}"}
HI = [{"role": "user", "content": "Say hi."}]
CHAT = {"model": SMOLLM2, "messages": HI, "max_tokens": 4}
Body = Callable[[int], tuple[str, dict]]          # the i-th request: (path under /v1, JSON body)


def _schema(schema: dict) -> dict:
    return {**CHAT, "response_format": {"type": "json_schema",
                                        "json_schema": {"name": "s", "schema": schema, "strict": True}}}


def _pattern(p: str) -> dict:
    return _schema({"type": "object", "additionalProperties": False, "required": ["a"],
                    "properties": {"a": {"type": "string", "pattern": p}}})


def _obj(props: dict) -> dict:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


VOCAB: list[Body] = [
    lambda i: ("/completions", {"model": SMOLLM2, "prompt": [1, 60000 + i % 1000], "max_tokens": 2}),
    lambda i: ("/completions", {"model": SMOLLM2, "prompt": [2**40 + i], "max_tokens": 2}),
]
PATTERNS: list[Body] = [
    lambda i: ("/chat/completions", _pattern(rf"(a{i % 7})\1")),
    lambda i: ("/chat/completions", _pattern(rf"\bx{i % 7}\b")),
]
GRAMMARS: list[Body] = [     # each made new by i, so no grammar cache helps
    lambda i: ("/chat/completions", _schema(_obj({"a": {"enum": [f"v{i}-{k}" for k in range(60_000)]}}))),
    lambda i: ("/chat/completions", {**CHAT, "tool_choice": "required", "tools": [
        {"type": "function", "function": {"name": f"f{i}_{t}", "parameters": _obj(
            {f"p{i}_{k}": {"type": "string"} for k in range(150)})}} for t in range(128)]}),
    lambda i: ("/chat/completions", _schema({"anyOf": [_obj({f"k{i}_{k}": {"type": "integer"}})
                                                       for k in range(1000)]})),
    lambda i: ("/chat/completions", _schema(_obj({f"k{i}_{k}": {"type": "integer"} for k in range(20_000)}))),
    lambda i: ("/chat/completions", _pattern(r"[\s\S]{0," + f"{20_000 + i}" + "}")),
]


@dataclass(frozen=True)
class Target:
    """What an attack needs of the deployment: its API's base URL, port and process id."""
    base_url: str
    port: int
    api_pid: int

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=KEYS["mallory"], max_retries=0, timeout=600)


class Halt(Protocol):
    """A threading or multiprocessing Event."""
    def is_set(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> bool: ...


@dataclass
class Attack:
    """`run(target, halt)` attacks until `halt` is set and returns what came back; `prepare()` makes what it
    sends beforehand, in the attacker's process, before the measured round starts."""
    run: Callable[[Target, Halt], dict]
    prepare: Callable[[], None] = lambda: None


def _post(http: httpx.Client, path: str, body: dict | bytes) -> int | str:
    """The answer's status (with the error's code for a 5xx); 0 where the caller hung up first."""
    try:
        if isinstance(body, bytes):
            r = http.post(path, content=body, headers={"content-type": "application/json"})
        else:
            r = http.post(path, json=body)
        if r.status_code < 500:
            return r.status_code
        try:
            return f"{r.status_code} {r.json()['error']['code']}"
        except (ValueError, KeyError, TypeError):
            return f"{r.status_code} {r.text[:80]}"
    except httpx.TimeoutException:
        return 0                                                 # the caller hung up
    except httpx.HTTPError:
        return 599


def _paced(halt: Halt, every: float, act: Callable[[], None]) -> None:
    """`act()` until halted, starting at most once per `every` seconds."""
    while not halt.is_set():
        t0 = time.perf_counter()
        act()
        halt.wait(max(0.0, every - (time.perf_counter() - t0)))


def flood(bodies: list[Body], threads: int = 4, every: float = 1.0, lines: int = 40, variants: int = 16) -> Attack:
    """`bodies` in turn from `threads` threads until halted, one request per `every` seconds each, in `variants`
    versions serialized beforehand (the attacker's own CPU is not the service's to pay on a shared machine),
    and `lines` of them as one batch file's lines."""
    sent: list[tuple[str, bytes]] = []

    def prepare() -> None:
        sent.extend((path, json.dumps(body).encode()) for path, body in (b(i) for i in range(variants) for b in bodies))

    def run(d: Target, halt: Halt) -> dict:
        count = itertools.count()
        got: Counter = Counter()

        def loop() -> None:
            with httpx.Client(base_url=d.base_url, headers=AUTH, timeout=600) as http:
                _paced(halt, every, lambda: got.update([_post(http, *sent[next(count) % len(sent)])]))
        workers = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
        for w in workers:
            w.start()
        by_url: dict[str, list[dict]] = {}
        for i in range(lines):
            path, body = bodies[i % len(bodies)](10**6 + i)
            by_url.setdefault(path, []).append({"custom_id": f"h{i}", "method": "POST", "url": f"/v1{path}",
                                                "body": body})
        c = d.client()
        batches: Counter = Counter()
        for url, rows in by_url.items():
            f = c.files.create(file=("h.jsonl", jsonl(rows)), purpose="batch")
            b = wait_batch(c, c.batches.create(input_file_id=f.id, endpoint=f"/v1{url}",
                                               completion_window="24h").id, timeout=3600, every=1.0)
            codes = Counter(line["response"]["status_code"] if line.get("response") else "error"
                            for line in read_lines(c, b.error_file_id) + read_lines(c, b.output_file_id))
            batches[f"{b.status}: " + ", ".join(f"{n} x {k}" for k, n in sorted(codes.items(), key=str))] += 1
            c.files.delete(f.id)
        halt.wait()
        for w in workers:
            w.join(600)
        return {"status": dict(got), "batches": dict(batches)}
    return Attack(run, prepare)


WORDS = "alpha beta gamma delta river stone cloud maple north quiet amber field".split()   # a token each


def long_prompts(threads: int = 3, words: int = 7000) -> Attack:
    def run(d: Target, halt: Halt) -> dict:
        got: Counter = Counter()
        count = itertools.count()

        def loop() -> None:
            with httpx.Client(base_url=d.base_url, headers=AUTH, timeout=600) as http:
                while not halt.is_set():
                    i = next(count)
                    text = f"Request {i}: " + " ".join(WORDS[(i * 31 + k * k) % len(WORDS)] for k in range(words))
                    got[_post(http, "/chat/completions", {**CHAT, "max_tokens": 1,
                                                          "messages": [{"role": "user", "content": text}]})] += 1
        workers = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return {"status": dict(got)}
    return Attack(run)


def abandoned(wave: int = 110, patience: float = 3.0, every: float = 5.0) -> Attack:
    def run(d: Target, halt: Halt) -> dict:
        got: Counter = Counter()
        body = {**CHAT, "max_tokens": 2000}
        with httpx.Client(base_url=d.base_url, headers=AUTH, timeout=patience,
                          limits=httpx.Limits(max_connections=wave)) as http, ThreadPoolExecutor(wave) as pool:
            _paced(halt, every, lambda: got.update(pool.map(lambda _: _post(http, "/chat/completions", body),
                                                            range(wave))))
        return {"status": {"hung up" if k == 0 else k: n for k, n in got.items()}}
    return Attack(run)


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _big_head(port: int, size: int) -> tuple[str, float]:
    """One request head whose one header line is `size` bytes: the answer's status line and its time."""
    t0 = time.perf_counter()
    piece = b"a" * (1 << 20)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        try:
            s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ")
            for _ in range(size >> 20):
                s.sendall(piece)
            s.sendall(b"\r\n\r\n")
        except OSError:
            pass                                            # the API closed the connection
        try:
            line = s.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace") or "closed"
        except OSError:
            line = "closed"
    return line, time.perf_counter() - t0


def headers(every: float = 0.5) -> Attack:
    def run(d: Target, halt: Halt) -> dict:
        pid = d.api_pid
        rss0, peak = _rss_kb(pid), 0
        got: Counter = Counter()
        times: list[float] = []
        def pair() -> None:
            nonlocal peak
            for line, s in pool.map(lambda n: _big_head(d.port, n), (150 << 20, 200 << 20)):
                got[line] += 1
                times.append(s)
            peak = max(peak, _rss_kb(pid))
        with ThreadPoolExecutor(2) as pool:
            _paced(halt, every, pair)
        return {"status": dict(got), "api_rss_growth_mb": round((peak - rss0) / 1024, 1),
                "answer_s_max": round(max(times), 3) if times else None}
    return Attack(run)


BOUNDARY = "attack-boundary"


def _upload(port: int, barrier: threading.Barrier, size: int = 4_400_000) -> int:
    """A 4.4 MB file upload whose head and form fields go first, its bytes after every racer has sent as much."""
    head = (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="q.jsonl"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()

    def body() -> Iterator[bytes]:
        yield head
        barrier.wait(60)
        line = b'{"x": 1}\n' * 7000
        for k in range(0, size, len(line)):
            yield line[:size - k]
        yield tail
    hdrs = {**AUTH, "content-type": f"multipart/form-data; boundary={BOUNDARY}",
            "content-length": str(len(head) + size + len(tail))}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}/v1", timeout=120) as http:
        try:
            return http.post("/files", content=body(), headers=hdrs).status_code
        except httpx.HTTPError:
            return 599


def quota(racers: int = 10, every: float = 5.0) -> Attack:
    def run(d: Target, halt: Halt) -> dict:
        got: Counter = Counter()
        most = 0
        c = d.client()
        def wave() -> None:
            nonlocal most
            barrier = threading.Barrier(racers)
            got.update(pool.map(lambda _: _upload(d.port, barrier), range(racers)))
            files = [f for f in c.files.list(limit=100) if f.filename == "q.jsonl"]
            most = max(most, sum(f.bytes for f in files))
            for f in files:
                c.files.delete(f.id)
        with ThreadPoolExecutor(racers) as pool:
            _paced(halt, every, wave)
        return {"status": dict(got), "most_stored_mb": round(most / 1e6, 2)}
    return Attack(run)


ATTACKS: dict[str, Attack] = {"vocab": flood(VOCAB), "patterns": flood(PATTERNS), "grammars": flood(GRAMMARS, lines=5),
                              "long_prompts": long_prompts(), "abandoned": abandoned(), "headers": headers(),
                              "quota": quota()}


def attack_process(name: str, target: Target, go: Halt, halt: Halt, out) -> None:
    """The body of the attacker's own process (so its CPU and its GIL are never the measured tenant's): it
    says it is ready once its imports are done, attacks when `go` is set, until `halt` is."""
    ATTACKS[name].prepare()
    out.put("ready")
    go.wait()
    out.put(ATTACKS[name].run(target, halt))
