"""A real BlendServe deployment: each role a real process, a real database, a real port.

Tests and benchmarks both start the service through this module (tests/live.py re-exports it), so a benchmark
measures exactly the deployment the tests check. Its defaults are test values (3-s leases, 4-request chunks,
50-ms polls); a benchmark that measures the service as users run it passes the service's own values as env.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import openai

ROLES = ("api", "scheduler", "worker")
READY = {"api": "api listening on", "scheduler": "(planner=", "worker": "blendserve.worker INFO worker worker_"}


PG_ADMIN = os.environ.get("BLENDSERVE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def pg_schema_url(admin: str = PG_ADMIN) -> str:
    """A fresh PostgreSQL schema per deployment, so runs never see each other's rows."""
    import secrets

    import sqlalchemy as sa

    schema = f"t_{secrets.token_hex(6)}"
    eng = sa.create_engine(admin)
    with eng.begin() as c:
        c.execute(sa.text(f"CREATE SCHEMA {schema}"))
    eng.dispose()
    return f"{admin}?options=-csearch_path%3D{schema}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Deployment:
    """API + scheduler + worker(s) as separate processes, so a test can kill any one of them."""

    def __init__(self, data_dir: Path, db_url: str, models: str, **env: str) -> None:
        self.data_dir, self.port = data_dir, free_port()
        self.env = {**os.environ, "BLENDSERVE_DATA_DIR": str(data_dir), "BLENDSERVE_DATABASE_URL": db_url,
                    "BLENDSERVE_MODELS": models, "BLENDSERVE_POLL_INTERVAL_S": "0.05",
                    "BLENDSERVE_PLAN_MAX_WAIT_S": "0.1", "BLENDSERVE_LEASE_SECONDS": "3",
                    "BLENDSERVE_CHUNK_REQUESTS": "4", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                    **env}
        self.procs: dict[str, subprocess.Popen] = {}
        self.roles: dict[str, str] = {}
        self.offsets: dict[str, int] = {}   # where each process's part of its (appended) log begins
        self.logs = data_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def start(self, role: str, name: str | None = None, *extra: str) -> subprocess.Popen:
        name = name or role
        args = [sys.executable, "-m", "blendserve", "--log-level", "INFO", role, *extra]
        if role == "api":
            args += ["--port", str(self.port)]
        log = open(self.logs / f"{name}.log", "ab")
        self.offsets[name] = log.tell()
        p = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name], self.roles[name] = p, role
        return p

    def start_all(self) -> Deployment:
        for role in ROLES:
            self.start(role)
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 120) -> None:
        """Every started role has said it is running (a batch created earlier could expire unseen)."""
        deadline = time.time() + timeout
        waiting = set(self.procs)
        while waiting and time.time() < deadline:
            for name in list(waiting):
                if self.procs[name].poll() is not None:
                    raise RuntimeError(f"{name} exited with {self.procs[name].returncode}:\n{self.log(name)}")
                if READY[self.roles[name]] in self.log(name, tail=None)[self.offsets[name]:] and \
                        (self.roles[name] != "api" or self.accepts()):
                    waiting.discard(name)
            time.sleep(0.1)
        if waiting:
            raise TimeoutError(f"{sorted(waiting)} did not come up:\n" + "\n".join(self.log(n) for n in waiting))

    def accepts(self) -> bool:
        """The API's port takes connections (the api role says it listens just before it binds)."""
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        p = self.procs.pop(name)
        os.killpg(p.pid, sig)
        p.wait(30)

    def stop(self) -> None:
        for name in list(self.procs):
            p = self.procs[name]
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for name in list(self.procs):
            p = self.procs.pop(name)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:     # stuck before its signal handler runs: leave no orphan behind
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)

    def start_serve(self, name: str = "serve", *extra: str) -> subprocess.Popen:
        """`blendserve serve` (API + scheduler + worker under one supervisor) as one process."""
        args = [sys.executable, "-m", "blendserve", "--log-level", "INFO", "serve", "--port", str(self.port), *extra]
        log = open(self.logs / f"{name}.log", "ab")
        self.offsets[name] = log.tell()
        p = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name], self.roles[name] = p, "serve"
        return p

    def wait_serving(self, name: str = "serve", timeout: float = 120) -> None:
        """Every role under a `serve` supervisor has said it is running."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"{name} exited with {self.procs[name].returncode}:\n{self.log(name)}")
            text = self.log(name, tail=None)[self.offsets[name]:]
            if all(READY[role] in text for role in ROLES) and self.accepts():
                return
            time.sleep(0.1)
        raise TimeoutError(f"{name} did not come up:\n{self.log(name)}")

    def signal(self, name: str, sig: int, group: bool = False, timeout: float = 60) -> float:
        """Send sig to the process (or its whole process group, as a terminal's Ctrl-C does); wait for it
        to exit and return how many seconds that took. The process is forgotten either way."""
        p = self.procs.pop(name)
        t0 = time.time()
        if group:
            os.killpg(p.pid, sig)
        else:
            p.send_signal(sig)
        p.wait(timeout)
        return time.time() - t0

    def log(self, name: str, tail: int | None = 4000) -> str:
        path = self.logs / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return text[-tail:] if tail else text

    def client(self, api_key: str = "unused") -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, timeout=60)


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def chat_lines(n: int, model: str, max_tokens: int = 8, prefix: str = "", **body) -> list[dict]:
    return [{"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": model, "max_tokens": max_tokens,
                      "messages": [{"role": "user", "content": f"{prefix}question {i}"}], **body}}
            for i in range(n)]


TERMINAL = ("completed", "failed", "expired", "cancelled")


def wait_batch(client: openai.OpenAI, batch_id: str, timeout: float = 180, until=TERMINAL, every: float = 0.2):
    """Poll until the batch reaches ``until``; benchmarks poll seldom (``every``), as a user's script does,
    since each poll costs the API and the client CPU beside the engine."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        b = client.batches.retrieve(batch_id)
        if (b.status in until) if isinstance(until, tuple) else until(b):
            return b
        time.sleep(every)
    raise TimeoutError(f"batch {batch_id} still {b.status}: {b.request_counts}")


def run_batch(client: openai.OpenAI, rows: list[dict], endpoint: str = "/v1/chat/completions", **kw):
    f = client.files.create(file=("input.jsonl", jsonl(rows)), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint=endpoint, completion_window="24h", **kw)
    return wait_batch(client, b.id)


def read_lines(client: openai.OpenAI, file_id: str | None) -> list[dict]:
    if not file_id:
        return []
    return [json.loads(x) for x in client.files.content(file_id).text.splitlines() if x.strip()]
