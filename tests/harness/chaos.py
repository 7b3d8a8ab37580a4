"""Chaos: stop processes at random while a batch runs; the batch must still finish, every line once.

`run_chaos`: a seeded schedule of stops (SIGTERM or SIGKILL) hits `blendserve serve` as a whole and the roles
it supervises (api, scheduler, worker) one at a time; with more than one worker or scheduler, the extra
worker and scheduler processes too. A stopped `serve` is started again at once; a role under `serve`
is restarted by its supervisor; an extra role is restarted here. At the end the batch must be
`completed` with every custom_id exactly once across the output and error files, and no error line
(every input line is valid).

`run_server_kills`: the stops hit the engine instead: the worker runs `--engine openai` in front of
vLLM's own OpenAI server (a child process here), and that server is SIGKILLed and started again
at spread points of the batch (a seeded share of the lines done, each kill while requests are in
flight). Checked besides: no line failed, and no request was charged an attempt (a lost server is not
the request's fault); it needs an interpreter that imports both BlendServe and vLLM.

tests/reliability/test_chaos.py runs a short `run_chaos`; benchmarks/chaos.py runs both at full length.
"""
from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import openai
import sqlalchemy as sa

from tests.harness.deployment import READY, Deployment, chat_lines, jsonl, pg_schema_url, read_lines
from tests.harness.vllm_server import VllmServer, small_server_flags

MISSED = -1.0          # _stop found no process: the role was still being restarted
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
ROLE_OF = {"api": " api ", "scheduler": " scheduler", "worker": " worker "}


@dataclass
class ChaosReport:
    backend: str
    workers: int
    schedulers: int
    requests: int
    seed: int
    stops: list[dict] = field(default_factory=list)     # {at_s, target, signal, exit_s}
    status: str = ""
    completed: int = 0
    error_lines: int = 0
    lost: int = 0
    duplicated: int = 0
    total_s: float = 0.0
    finish_after_last_restart_s: float = 0.0

    @property
    def survived(self) -> int:
        """Stops that hit a process, if the batch came through them whole."""
        whole = self.lost == 0 and self.duplicated == 0 and self.status == "completed"
        return sum(not s.get("missed") for s in self.stops) if whole else 0


def _children(pid: int) -> dict[str, int]:
    """The roles `serve` supervises, by name: their pids, read from /proc."""
    out = {}
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for kid in kids:
        try:
            cmd = Path(f"/proc/{kid}/cmdline").read_bytes().replace(b"\0", b" ").decode() + " "
        except OSError:
            continue
        for role, mark in ROLE_OF.items():
            if mark in cmd:
                out[role] = int(kid)
    return out


def _wait_role(d: Deployment, name: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while READY[d.roles[name]] not in d.log(name, tail=None)[d.offsets[name]:]:
        if time.time() > deadline or d.procs[name].poll() is not None:
            raise RuntimeError(f"{name} did not come up:\n{d.log(name)}")
        time.sleep(0.1)


def _poll(c: openai.OpenAI, batch_id: str):
    """The batch, or None while the API is down."""
    try:
        return c.batches.retrieve(batch_id)
    except (openai.APIConnectionError, openai.APITimeoutError, openai.InternalServerError):
        return None


def run_chaos(data_dir: Path, models: str, backend: str = "sqlite", requests: int = 500, stops: int = 20,
              workers: int = 1, schedulers: int = 1, seed: int = 0, max_tokens: int = 400,
              gap_s: tuple[float, float] = (2.0, 6.0), timeout_s: float = 1800,
              targets: list[str] | None = None, **env: str) -> ChaosReport:
    """env: extra BLENDSERVE_* settings for every role (e.g. a smaller CPU batch, for a longer run)."""
    rng = random.Random(seed)
    url = "" if backend == "sqlite" else pg_schema_url()
    d = Deployment(data_dir, url, models, **env)
    rep = ChaosReport(backend, workers, schedulers, requests, seed)
    extras = [("worker", f"worker{i}") for i in range(1, workers)] + \
             [("scheduler", f"scheduler{i}") for i in range(1, schedulers)]
    targets = targets or ["serve", "serve:api", "serve:scheduler", "serve:worker"] + [name for _, name in extras]
    # Every target and both signals come up: targets cycle in a shuffled order, signals alternate.
    plan = [(targets[i % len(targets)], ("SIGTERM", "SIGKILL")[(i // len(targets) + i) % 2]) for i in range(stops)]
    rng.shuffle(plan)
    try:
        d.start_serve()
        for role, name in extras:
            d.start(role, name)
        d.wait_serving()
        for _, name in extras:
            _wait_role(d, name)
        c = d.client()
        rows = chat_lines(requests, models.split("=")[0], max_tokens=max_tokens, prefix="chaos ")
        f = c.files.create(file=("chaos.jsonl", jsonl(rows)), purpose="batch")
        t0 = time.time()
        b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        last_restart = t0
        for target, sig in plan:
            time.sleep(rng.uniform(*gap_s))
            now = _poll(c, b.id)
            if now is not None and now.status == "completed":
                break
            at = time.time() - t0
            exit_s = _stop(d, target, SIGNALS[sig])
            rep.stops.append({"at_s": round(at, 1), "target": target, "signal": sig, "done_before": now and
                              now.request_counts.completed, "missed": exit_s == MISSED,
                              "exit_s": round(exit_s, 2) if exit_s not in (None, MISSED) else None})
            last_restart = time.time()
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            now = _poll(c, b.id)
            if now is not None and now.status in ("completed", "failed", "expired", "cancelled"):
                break
            time.sleep(0.5)
        rep.total_s = round(time.time() - t0, 1)
        rep.finish_after_last_restart_s = round(time.time() - last_restart, 1)
        rep.status = now.status if now is not None else "unknown"
        out, err = read_lines(c, now.output_file_id), read_lines(c, now.error_file_id)
        seen = Counter(x["custom_id"] for x in out + err)
        rep.completed, rep.error_lines = len(out), len(err)
        rep.lost = sum(1 for r in rows if r["custom_id"] not in seen)
        rep.duplicated = sum(n - 1 for n in seen.values() if n > 1)
        return rep
    finally:
        d.stop()


def _stop(d: Deployment, target: str, sig: int) -> float | None:
    """Stop one target and start it again; returns how long a SIGTERM took to end it."""
    if target == "serve":
        if sig == signal.SIGKILL:            # a power cut: the supervisor and every role at once
            p = d.procs.pop("serve")
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)
            took = None
        else:                                # `docker stop`: SIGTERM to the supervisor alone
            took = d.signal("serve", sig)
        d.start_serve()
        d.wait_serving()
        return took
    if target.startswith("serve:"):          # one role under the supervisor, which restarts it
        pid = _children(d.procs["serve"].pid).get(target.split(":")[1])
        if pid is None:
            return MISSED
        t = time.time()
        os.kill(pid, sig)
        while Path(f"/proc/{pid}").exists() and time.time() - t < 30:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                break
            time.sleep(0.05)
        return time.time() - t if sig == signal.SIGTERM else None
    role = d.roles[target]
    took = d.signal(target, sig, group=True)
    d.start(role, target)
    return took if sig == signal.SIGTERM else None


@dataclass
class ServerKillReport:
    engine_server: str
    backend: str
    requests: int
    max_tokens: int
    seed: int
    kills: list[dict] = field(default_factory=list)     # {at_s, done_before, running, waiting, down_s, start_s}
    status: str = ""
    completed: int = 0
    failed: int = 0
    error_lines: int = 0
    lost: int = 0
    duplicated: int = 0
    max_attempts: int | None = None
    worker_lost_server: int = 0         # the worker's "lost the server" lines
    worker_server_back: int = 0         # its "answers again" lines
    total_s: float = 0.0
    finish_after_last_restart_s: float = 0.0

    @property
    def whole(self) -> bool:
        """Every line once, none failed, none charged an attempt for the server's outages."""
        return (self.status == "completed" and self.lost == self.duplicated == self.failed == self.error_lines == 0
                and self.max_attempts == 0)


def kill_points(requests: int, kills: int, rng: random.Random) -> list[int]:
    """Lines done at which each kill comes: one in each of kills equal slices of the batch's middle
    (its first and last 5% left alone), at a seeded place in its slice."""
    lo, hi = 0.05 * requests, 0.95 * requests
    width = (hi - lo) / kills
    return [int(lo + width * (i + rng.uniform(0.2, 0.8))) for i in range(kills)]


def run_server_kills(data_dir: Path, model: str, checkpoint: Path, backend: str = "sqlite", requests: int = 200,
                     kills: int = 5, seed: int = 0, max_tokens: int = 32, max_num_seqs: int = 16,
                     down_s: tuple[float, float] = (0.0, 15.0), timeout_s: float = 3600,
                     **env: str) -> ServerKillReport:
    """A batch through a worker in front of a vLLM server that is SIGKILLed `kills` times mid-batch. Each
    restart comes after a seeded pause in down_s (0: at once; longer: past the worker's probe back-off)."""
    rng = random.Random(seed)
    url = "" if backend == "sqlite" else pg_schema_url()
    data_dir.mkdir(parents=True, exist_ok=True)
    server = VllmServer(small_server_flags(checkpoint, model, max_num_seqs), data_dir / "vllm-server.log")
    rep = ServerKillReport("vllm", backend, requests, max_tokens, seed)
    d = Deployment(data_dir, url, f"{model}={checkpoint}", **env)
    try:
        server.start()
        for role in ("api", "scheduler"):
            d.start(role)
        d.start("worker", None, "--engine", "openai", "--url", server.url)
        d.wait_ready(timeout=300)
        c = d.client()
        rows = chat_lines(requests, model, max_tokens=max_tokens, prefix="chaos ")
        f = c.files.create(file=("chaos.jsonl", jsonl(rows)), purpose="batch")
        t0 = time.time()
        b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        last_restart = t0
        now = b
        for point in kill_points(requests, kills, rng):
            while (now := _poll(c, b.id) or now).status != "completed" and now.request_counts.completed < point:
                if time.time() - t0 > timeout_s:
                    break
                time.sleep(0.2)
            if now.status == "completed":
                break
            running, waiting = server.requests_now()
            at = time.time()
            server.kill()
            pause = 0.0 if rng.random() < 0.4 else rng.uniform(*down_s)
            time.sleep(pause)
            started = server.start()
            last_restart = time.time()
            rep.kills.append({"at_s": round(at - t0, 1), "done_before": now.request_counts.completed,
                              "running": running, "waiting": waiting, "pause_s": round(pause, 1),
                              "down_s": round(last_restart - at, 1), "start_s": round(started, 1)})
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            now = _poll(c, b.id) or now
            if now.status in ("completed", "failed", "expired", "cancelled"):
                break
            time.sleep(0.5)
        rep.total_s = round(time.time() - t0, 1)
        rep.finish_after_last_restart_s = round(time.time() - last_restart, 1)
        rep.status, rep.failed = now.status, now.request_counts.failed
        out, err = read_lines(c, now.output_file_id), read_lines(c, now.error_file_id)
        seen = Counter(x["custom_id"] for x in out + err)
        rep.completed, rep.error_lines = len(out), len(err)
        rep.lost = sum(1 for r in rows if r["custom_id"] not in seen)
        rep.duplicated = sum(n - 1 for n in seen.values() if n > 1)
        db = sa.create_engine(url or f"sqlite:///{data_dir / 'blendserve.db'}")
        with db.connect() as conn:
            rep.max_attempts = conn.execute(sa.text("SELECT max(attempts) FROM requests")).scalar()
        db.dispose()
        log = d.log("worker", tail=None)
        rep.worker_lost_server = log.count("lost the server")
        rep.worker_server_back = log.count("answers again")
        return rep
    finally:
        d.stop()
        server.kill()
