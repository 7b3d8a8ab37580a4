"""Fixtures for the engine tests: a tiny random Llama (fast) and the real SmolLM2 (one test)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from core.modelstore import build_tiny_model, ensure_checkpoint, smollm2_gguf_path  # noqa: E402
from worker.engines.cpu import CpuEngine  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)


@pytest.fixture
def tiny_engine(tiny_model: Path) -> CpuEngine:
    return CpuEngine(tiny_model, "tiny", max_batch=4, threads=1)


@pytest.fixture(scope="session")
def smollm2_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_checkpoint(smollm2_gguf_path(), tmp_path_factory.mktemp("models"))
