"""An engine's HTTP server as a child process that a benchmark or a test can time, kill and start again.

It runs in a session of its own, so a kill takes its engine processes too, and it comes back on the same
port, as a restarted pod behind a Service does. tests/harness/vllm_server.py and tests/harness/sglang_server.py
say which command and environment each engine's server takes.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.harness.deployment import free_port


class ServerProcess:
    """`args` is the command, `env` what it adds to this process's environment, `health` the path that
    answers 200 once it serves."""

    name = "server"
    health = "/health"

    def __init__(self, log_path: Path) -> None:
        self.port, self.log_path = free_port(), log_path
        self.url = f"http://127.0.0.1:{self.port}"
        self.args: list[str] = []
        self.env: dict[str, str] = {}
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 600) -> float:
        """Start it and wait until it serves; returns the seconds that took."""
        t0 = time.time()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, env={**os.environ, "HF_HUB_OFFLINE": "1", **self.env},
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}{self.health}", timeout=2).status_code == 200:
                    return time.time() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{self.name} did not come up in {timeout:.0f}s:\n{self.log()}")

    def kill(self) -> None:
        """SIGKILL the server's whole session: a crash, not a shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None

    def metric(self, name: str) -> float:
        """One metric from the server's /metrics, summed over its labels."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") or line.startswith(name + " "))

    def log(self, tail: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:] if self.log_path.exists() else ""
