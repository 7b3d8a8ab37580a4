"""Fixtures for the engine tests: a tiny random Llama (fast) and the real SmolLM2 (one test)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from blendserve.core.engine_settings import CpuEngineSettings  # noqa: E402
from blendserve.core.modelstore import build_tiny_model  # noqa: E402
from blendserve.worker.engines.cpu import CpuEngine  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)


@pytest.fixture
def tiny_engine(tiny_model: Path) -> CpuEngine:
    return CpuEngine(tiny_model, "tiny", max_running=4, threads=1, block_size=4, kv_capacity_tokens=4096,
                     config=CpuEngineSettings())
