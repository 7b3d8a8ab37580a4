"""Fixtures of the feature tests: the shared live deployment once its worker answers interactively, and a CPU
engine on the tiny model for engine-level checks."""
from __future__ import annotations

import time

import openai
import pytest

from tests.conftest import TINY

HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="session")
def served(deployment):
    """The session's deployment (SQLite and PostgreSQL), once the API knows a worker for interactive calls."""
    c = deployment.client()
    deadline = time.time() + 60
    while True:
        try:
            c.chat.completions.create(model=TINY, messages=HELLO, max_tokens=1)
            return deployment
        except openai.APIStatusError as e:
            if e.status_code != 503 or time.time() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="session")
def tiny_engine(tiny_model):
    from blendserve.core.engine_settings import CpuEngineSettings
    from blendserve.worker.engines.cpu.engine import CpuEngine

    return CpuEngine(tiny_model, TINY, threads=1, kv_capacity_tokens=16384, config=CpuEngineSettings())
