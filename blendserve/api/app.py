"""The API role: an OpenAI-compatible Files + Batches HTTP service over the job table."""
from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi

from blendserve.api import errors, fastpath
from blendserve.api.auth import FrontDoor, redact_access_log
from blendserve.api.deps import AppState, clean_params
from blendserve.api.lanes import Lanes
from blendserve.api.routes import batches, completions, dashboard, embeddings, files, models, ops, responses, uploads
from blendserve.api.routes.outputs import router as outputs_router
from blendserve.api.sessions import Sessions
from blendserve.api.status import StatusCache
from blendserve.core.config import Settings
from blendserve.core.db import make_engine, make_sessionmaker
from blendserve.core.owners import Keyring, adopt
from blendserve.core.served import checkpoints, created_at, model_names
from blendserve.core.storage import FileStore
from blendserve.migrations.upgrade import upgrade


def create_app(settings: Settings, *, migrate: bool = True) -> FastAPI:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if migrate:
        upgrade(settings.db_url, settings)
    app = fastpath.PollingApp(title="BlendServe", version="0.1.0")
    readers = make_sessionmaker(make_engine(settings.db_url, readonly=True))
    app.state.blend = AppState(settings=settings, sessions=make_sessionmaker(make_engine(settings.db_url)),
                               read_sessions=readers, store=FileStore(settings.files_dir),
                               model_names=model_names(settings), status_cache=StatusCache(settings.status_cache_s),
                               lanes=Lanes(readers, settings.lease_seconds, settings.worker_secret, settings.limit,
                                           bool(settings.api_keys), checkpoints(settings), settings.grammar),
                               keyring=Keyring.parse(settings.api_keys),
                               signer=Sessions(settings.session_secret, settings.session_ttl_s),
                               model_created=created_at(settings))
    if migrate:
        with app.state.blend.sessions.begin() as s:
            adopt(s, app.state.blend.keyring)     # rows of a plain key now listed under a tenant move to it
    app.state.blend.store.sweep_temp()     # uploads cut off by a crash; live ones keep their mtime fresh
    errors.install(app)
    redact_access_log()
    for r in (files.router, batches.router, models.router, completions.router, embeddings.router,
              responses.router, uploads.router):
        app.include_router(r, dependencies=[Depends(clean_params)])
    app.include_router(outputs_router, dependencies=[Depends(clean_params)])   # a running batch's finished lines
    for r in (ops.router, dashboard.router):    # probes, scrapes and the page: no key, no /v1 conventions
        app.include_router(r)

    app.add_middleware(FrontDoor, state=app.state.blend)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"],
                           allow_headers=["authorization", "content-type"], max_age=600,
                           expose_headers=["X-BlendServe-Cursor", "X-BlendServe-Done"])   # the output route's cursor
    fastpath.install(app, app.state.blend)     # cached status polls, before all of the above (the same key check)
    app.openapi = lambda: _openapi(app, settings)
    return app


def _openapi(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """FastAPI's schema, less the 422 it documents for every route (invalid requests answer 400 here, as
    OpenAI's do), with this deployment's completion windows and, with keys set, its bearer auth."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        for path in schema.get("paths", {}).values():
            for op in path.values():
                op.get("responses", {}).pop("422", None)
        components = schema.setdefault("components", {})
        for name in ("HTTPValidationError", "ValidationError"):
            components.get("schemas", {}).pop(name, None)
        create = components.get("schemas", {}).get("CreateBatch", {}).get("properties", {})
        if "completion_window" in create:
            create["completion_window"]["enum"] = list(settings.completion_windows)
        upload = components.get("schemas", {}).get("CreateUpload", {}).get("properties", {})
        if "bytes" in upload:
            upload["bytes"]["maximum"] = settings.upload_max_bytes
        if settings.api_keys:
            components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            for path, operations in schema["paths"].items():
                for op in operations.values():
                    op["security"] = [{"bearer": []}] if path.startswith("/v1/") else []
        app.openapi_schema = schema
    return app.openapi_schema
