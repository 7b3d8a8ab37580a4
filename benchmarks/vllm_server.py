"""vLLM's own OpenAI server (its CPU build) as a child process that a benchmark or a test can time, kill and
start again, and the vLLM engine arguments written as that server's (and `run_batch`'s) command-line flags.

`python -m vllm.entrypoints.openai.api_server`, because the CPU build's `vllm` command fails on its package
name. The server runs in a session of its own, so a kill takes its engine core too, and it comes back on the
same port, as a restarted pod behind a Service does.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from benchmarks.deployment import free_port


def cli_flags(args: dict) -> list[str]:
    """vllm.EngineArgs keyword arguments as command-line flags (run_batch's and the server's)."""
    flags = []
    for k, v in args.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            flags.append(flag)
        elif isinstance(v, list):
            flags += [flag, *map(str, v)]
        elif isinstance(v, dict):                 # e.g. speculative_config: vLLM parses the flag as JSON
            flags += [flag, json.dumps(v)]
        elif v is not False:
            flags += [flag, str(v)]
    return flags


def small_server_flags(checkpoint: Path, name: str, max_num_seqs: int, num_blocks: int = 512,
                       block_size: int = 32) -> list[str]:
    """A small server for tests and the chaos run: eager, seeded, a fixed number of KV blocks."""
    from worker.engines.vllm import default_dtype

    return ["--model", str(checkpoint), "--served-model-name", name, "--dtype", default_dtype(),
            "--enforce-eager", "--seed", "0", "--max-num-seqs", str(max_num_seqs), "--block-size", str(block_size),
            "--num-gpu-blocks-override", str(num_blocks), "--max-num-batched-tokens", "2048"]


class VllmServer:
    """`flags` name the model and its engine arguments; the server adds its address, cached-token details in
    usage, and `--generation-config vllm`: only the request's own sampling fields apply, as on the in-process
    engine (vLLM's default puts the checkpoint's generation_config.json beneath them)."""

    def __init__(self, flags: list[str], log_path: Path) -> None:
        self.port, self.log_path = free_port(), log_path
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *flags,
                     "--host", "127.0.0.1", "--port", str(self.port), "--enable-prompt-tokens-details",
                     "--generation-config", "vllm"]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 600) -> float:
        """Start it and wait for /health; returns the seconds that took."""
        t0 = time.time()
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
               "HF_HUB_OFFLINE": "1"}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return time.time() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"vllm serve did not come up in {timeout:.0f}s:\n{self.log()}")

    def kill(self) -> None:
        """SIGKILL the server's whole session (API process and engine core): a crash, not a shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None

    def metric(self, name: str) -> float:
        """One metric from the server's /metrics, summed over its labels."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") or line.startswith(name + " "))

    def requests_now(self) -> tuple[int, int]:
        """Requests running and waiting in the server ((-1, -1): it did not answer)."""
        try:
            return int(self.metric("vllm:num_requests_running")), int(self.metric("vllm:num_requests_waiting"))
        except httpx.HTTPError:
            return -1, -1

    def log(self, tail: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:] if self.log_path.exists() else ""
