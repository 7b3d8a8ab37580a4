"""The API role: an OpenAI-compatible Files + Batches HTTP service over the job table."""
from __future__ import annotations

from fastapi import FastAPI

from core.config import Settings
from core.db import make_engine, make_sessionmaker
from core.migrate import upgrade
from core.served import model_names
from core.storage import FileStore
from server import errors
from server.deps import AppState
from server.routes import batches, dashboard, files, models, ops


def create_app(settings: Settings, *, migrate: bool = True) -> FastAPI:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if migrate:
        upgrade(settings.db_url)
    app = FastAPI(title="BlendServe", version="0.1.0")
    app.state.blend = AppState(settings=settings, sessions=make_sessionmaker(make_engine(settings.db_url)),
                               read_sessions=make_sessionmaker(make_engine(settings.db_url, readonly=True)),
                               store=FileStore(settings.files_dir), model_names=model_names(settings))
    errors.install(app)
    for r in (files.router, batches.router, models.router, ops.router, dashboard.router):
        app.include_router(r)
    return app
