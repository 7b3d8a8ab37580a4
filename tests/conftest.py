"""Shared fixtures: a tiny real model, the two databases, and live deployments."""
from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.live import Deployment

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PG_ADMIN = os.environ.get("BLENDSERVE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TINY = "tiny-llama"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from core.modelstore import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


def _pg_schema_url() -> str:
    """A fresh schema per deployment, so runs never see each other's rows."""
    schema = f"t_{secrets.token_hex(6)}"
    eng = sa.create_engine(PG_ADMIN)
    with eng.begin() as c:
        c.execute(sa.text(f"CREATE SCHEMA {schema}"))
    eng.dispose()
    return f"{PG_ADMIN}?options=-csearch_path%3D{schema}"


# Limits of the shared deployment, small so tests can cross them cheaply.
MAX_LINES = 50
MAX_FILE_BYTES = 200_000


@pytest.fixture(params=["sqlite", "postgresql"], scope="session")
def backend(request) -> str:
    return request.param


def _factory(tmp_path_factory, tiny_model, backend, made: list[Deployment]):
    def make(**env: str) -> Deployment:
        url = "" if backend == "sqlite" else _pg_schema_url()
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
