"""all-MiniLM-L6-v2 from its PyPI package, and a deployment that serves it beside the tiny model."""
from __future__ import annotations

import time
from pathlib import Path

import openai
import pytest

from blendserve.core.embedstore import MINILM
from tests.conftest import TINY
from tests.live import Deployment, pg_schema_url


@pytest.fixture(scope="session")
def minilm(tmp_path_factory) -> Path:
    from blendserve.core.embedstore import ensure_minilm

    return ensure_minilm(tmp_path_factory.mktemp("minilm"))


@pytest.fixture(scope="module")
def embed_deployment(tmp_path_factory, tiny_model, minilm, backend):
    """API + scheduler + a worker per model (tiny-llama, all-MiniLM-L6-v2), on SQLite or PostgreSQL."""
    url = "" if backend == "sqlite" else pg_schema_url()
    d = Deployment(tmp_path_factory.mktemp(f"embed-{backend}"), url, f"{TINY}={tiny_model},{MINILM}={minilm}")
    try:
        d.start("api")
        d.start("scheduler")
        d.start("worker")
        d.start("worker", "embed-worker", "--model", MINILM)
        d.wait_ready()
        c = d.client()
        deadline = time.time() + 30
        while True:         # the API learns of a worker from its row, within a second of its first beat
            try:
                c.embeddings.create(model=MINILM, input="warm")
                c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "hi"}], max_tokens=1)
                break
            except openai.APIStatusError as e:
                if e.status_code != 503 or time.time() > deadline:
                    raise
                time.sleep(0.2)
        yield d
    finally:
        d.stop()
