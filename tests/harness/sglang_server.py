"""SGLang's own OpenAI server (`python -m sglang.launch_server`) and its router
(`python -m sglang_router.launch_router`) as child processes a test or a benchmark can kill and start again
(tests/harness/server_process.py).

The server reports cached prompt tokens in usage (`--enable-cache-report`), publishes Prometheus metrics
(`--enable-metrics`) and admits first-come (`--schedule-policy fcfs`), as the worker's in-process SGLang
engine runs it, so the plan's order is the order it runs. `flags` add the device and memory settings
(`cpu_flags` for SGLang's CPU path).
"""
from __future__ import annotations

import sys
from pathlib import Path

from tests.harness.deployment import free_port
from tests.harness.server_process import ServerProcess


def cpu_flags(max_total_tokens: int = 4096, max_running_requests: int | None = None) -> list[str]:
    """SGLang's CPU path: its native-torch attention, no CUDA graphs, a small KV pool."""
    flags = ["--device", "cpu", "--attention-backend", "torch_native", "--disable-cuda-graph",
             "--mem-fraction-static", "0.3", "--max-total-tokens", str(max_total_tokens)]
    if max_running_requests:
        flags += ["--max-running-requests", str(max_running_requests)]
    return flags


class SglangServer(ServerProcess):
    name = "sglang launch_server"

    def __init__(self, checkpoint: Path, served_name: str, flags: list[str], log_path: Path) -> None:
        super().__init__(log_path)
        self.args = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(checkpoint),
                     "--served-model-name", served_name, *flags, "--host", "127.0.0.1", "--port", str(self.port),
                     "--enable-cache-report", "--enable-metrics", "--schedule-policy", "fcfs",
                     "--log-level", "warning"]
        self.env = {"SGLANG_USE_CPU_ENGINE": "1"} if "cpu" in flags else {}


class SglangRouter(ServerProcess):
    """The router in front of `workers` (their URLs): what a team running many SGLang servers points
    clients at."""

    name = "sglang router"
    health = "/v1/models"       # /health answers before any server has registered; this once one has

    def __init__(self, workers: list[str], log_path: Path, policy: str = "round_robin") -> None:
        super().__init__(log_path)
        self.args = [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *workers,
                     "--policy", policy, "--host", "127.0.0.1", "--port", str(self.port),
                     "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
