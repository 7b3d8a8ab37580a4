"""vLLM's own OpenAI server (its CPU build) as a child process a test can kill and start again."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from core.config import SMOLLM2
from tests.live import free_port

# The in-process engine's test shape (tests/vllm/conftest.py): 4 running sequences, 512 blocks of 32 tokens.
MAX_NUM_SEQS, BLOCK_SIZE, NUM_BLOCKS = 4, 32, 512


class VllmServer:
    def __init__(self, checkpoint: Path, log_path: Path) -> None:
        from worker.engines.vllm import default_dtype

        self.port, self.log_path = free_port(), log_path
        self.url = f"http://127.0.0.1:{self.port}"
        # --generation-config vllm: the request's sampling fields alone, as the in-process engine has them
        # (the default applies the checkpoint's generation_config.json beneath them).
        self.args = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoint),
                     "--served-model-name", SMOLLM2, "--host", "127.0.0.1", "--port", str(self.port),
                     "--dtype", default_dtype(), "--enforce-eager", "--seed", "0",
                     "--max-num-seqs", str(MAX_NUM_SEQS), "--block-size", str(BLOCK_SIZE),
                     "--num-gpu-blocks-override", str(NUM_BLOCKS), "--max-num-batched-tokens", "2048",
                     "--enable-prompt-tokens-details", "--generation-config", "vllm"]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 400) -> VllmServer:
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"vllm serve did not come up in {timeout:.0f}s:\n{self.log()}")

    def kill(self) -> None:
        """SIGKILL the server and its engine core: a crash, not a shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None

    def metric(self, name: str) -> float:
        """One unlabelled-sum gauge or counter from the server's /metrics."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") or line.startswith(name + " "))

    def log(self, tail: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:] if self.log_path.exists() else ""
