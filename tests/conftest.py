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


@pytest.fixture(params=["sqlite", "postgresql"], scope="module")
def backend(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def make_deployment(tmp_path_factory, tiny_model, backend):
    """Factory for deployments on this module's backend; every one is stopped at the end."""
    made: list[Deployment] = []

    def make(**env: str) -> Deployment:
        url = "" if backend == "sqlite" else _pg_schema_url()
        d = Deployment(tmp_path_factory.mktemp(f"bs-{backend}"), url, f"{TINY}={tiny_model}", **env)
        made.append(d)
        return d

    yield make
    for d in made:
        d.stop()


@pytest.fixture(scope="module")
def deployment(make_deployment) -> Deployment:
    """One shared API + scheduler + worker per module and backend."""
    return make_deployment().start_all()
