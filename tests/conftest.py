"""Shared fixtures: a tiny real model, the two databases, and live deployments."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from tests.live import Deployment, pg_schema_url

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One torch thread per CPU engine in the tests' deployments: an API, schedulers and up to three
# workers share the machine's cores (two in CI, beside the vLLM install), and an OpenMP team that
# spins while another process holds its core stalls every op (test_short_chaos[postgresql]: 86 s
# on two threads, 34 s on one, on 2 cores). The product keeps its default: all cores, one worker.
os.environ.setdefault("BLENDSERVE_CPU_THREADS", "1")
TINY = "tiny-llama"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from blendserve.core.modelstore import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def smollm2_models(tmp_path_factory) -> Path:
    """SmolLM2 converted from its GGUF once per run (the slowest set-up step) into a shared models dir: with
    pytest-xdist, in the run's base folder that every worker's own sits in, so the workers convert it once
    between them (ensure_checkpoint renames a finished conversion into place: a worker sees none or all)."""
    from blendserve.core.modelstore import ensure_checkpoint, smollm2_gguf_path

    if os.environ.get("PYTEST_XDIST_WORKER"):
        models = tmp_path_factory.getbasetemp().parent / "models"
        with open(models.with_suffix(".lock"), "w") as lock:     # one worker converts; the others wait for it
            fcntl.flock(lock, fcntl.LOCK_EX)
            ensure_checkpoint(smollm2_gguf_path(), models)
        return models
    models = tmp_path_factory.mktemp("models")
    ensure_checkpoint(smollm2_gguf_path(), models)
    return models


@pytest.fixture(scope="session")
def smollm2_checkpoint(smollm2_models) -> Path:
    from blendserve.core.modelstore import ensure_checkpoint, smollm2_gguf_path

    return ensure_checkpoint(smollm2_gguf_path(), smollm2_models)


# Limits of the shared deployment, small so tests can cross them cheaply.
MAX_LINES = 400
MAX_FILE_BYTES = 200_000


@pytest.fixture(params=["sqlite", "postgresql"], scope="session")
def backend(request) -> str:
    """The database under a deployment: both, for every test whose subject goes through it (claims,
    leases, writes, recovery, validation, the endpoints' queries); SQLite only (``SQLITE_ONLY``) where the
    subject is not the database (the interactive lane, the CLI, logs, the worker's secret), to keep CI short."""
    return request.param


SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def _factory(tmp_path_factory, tiny_model, backend, made: list[Deployment]):
    def make(**env: str) -> Deployment:
        url = "" if backend == "sqlite" else pg_schema_url()
        d = Deployment(tmp_path_factory.mktemp(f"bs-{backend}"), url, f"{TINY}={tiny_model}", **env)
        made.append(d)
        return d

    return make


@pytest.fixture(scope="module")
def make_deployment(tmp_path_factory, tiny_model, backend):
    """Factory for deployments of a module's own configuration; every one is stopped at the end."""
    made: list[Deployment] = []
    yield _factory(tmp_path_factory, tiny_model, backend, made)
    for d in made:
        d.stop()


@pytest.fixture(scope="session")
def deployment(tmp_path_factory, tiny_model, backend):
    """One API + scheduler + worker per backend, shared by every test that needs no special set-up."""
    made: list[Deployment] = []
    d = _factory(tmp_path_factory, tiny_model, backend, made)(
        BLENDSERVE_MAX_REQUESTS_PER_FILE=str(MAX_LINES), BLENDSERVE_MAX_FILE_BYTES=str(MAX_FILE_BYTES),
        BLENDSERVE_COMPLETION_WINDOWS="24h,4s")
    yield d.start_all()
    d.stop()
