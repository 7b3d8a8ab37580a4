"""vLLM's own OpenAI server (its CPU build) as a child process that a benchmark or a test can time, kill and
start again (tests/harness/server_process.py), and the vLLM engine arguments written as that server's (and
`run_batch`'s) command-line flags.

`python -m vllm.entrypoints.openai.api_server`, because the CPU build's `vllm` command fails on its package
name.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx

from tests.harness.server_process import ServerProcess


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


def small_server_flags(checkpoint: Path, name: str, max_num_seqs: int | None, num_blocks: int = 512,
                       block_size: int = 32) -> list[str]:
    """A small server for tests and the chaos run: eager, seeded, a fixed number of KV blocks; max_num_seqs
    None: vLLM's own running cap (128 per CPU rank in 0.32)."""
    from blendserve.worker.engines.device import default_dtype

    cap = ["--max-num-seqs", str(max_num_seqs)] if max_num_seqs else []
    return ["--model", str(checkpoint), "--served-model-name", name, "--dtype", default_dtype(),
            "--enforce-eager", "--seed", "0", *cap, "--block-size", str(block_size),
            "--num-gpu-blocks-override", str(num_blocks), "--max-num-batched-tokens", "2048",
            "--structured-outputs-config", json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})]


class VllmServer(ServerProcess):
    """`flags` name the model and its engine arguments; the server adds its address, cached-token details in
    usage, and `--generation-config vllm`: only the request's own sampling fields apply, as on the in-process
    engine (vLLM's default puts the checkpoint's generation_config.json beneath them)."""

    name = "vllm serve"

    def __init__(self, flags: list[str], log_path: Path) -> None:
        super().__init__(log_path)
        self.args = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *flags,
                     "--host", "127.0.0.1", "--port", str(self.port), "--enable-prompt-tokens-details",
                     "--generation-config", "vllm"]
        self.env = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}

    def requests_now(self) -> tuple[int, int]:
        """Requests running and waiting in the server ((-1, -1): it did not answer)."""
        try:
            return int(self.metric("vllm:num_requests_running")), int(self.metric("vllm:num_requests_waiting"))
        except httpx.HTTPError:
            return -1, -1
