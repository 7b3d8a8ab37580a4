"""Per-request dependencies: the database session, the file store and the caller's identity."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session, sessionmaker

from blendserve.api.errors import APIError
from blendserve.api.lanes import Lanes
from blendserve.api.sessions import Sessions
from blendserve.api.status import StatusCache
from blendserve.core.config import Settings
from blendserve.core.owners import Keyring
from blendserve.core.storage import FileStore

T = TypeVar("T")


@dataclass
class AppState:
    settings: Settings
    sessions: sessionmaker[Session]    # writers: BEGIN IMMEDIATE on SQLite
    read_sessions: sessionmaker[Session]     # GET routes: a deferred read snapshot that never takes the write lock
    store: FileStore
    model_names: list[str]
    status_cache: StatusCache
    lanes: Lanes                       # the interactive lane's workers and connection pool
    keyring: Keyring                   # BLENDSERVE_API_KEYS, parsed once
    signer: Sessions                   # dashboard session cookies
    model_created: dict[str, int] = field(default_factory=dict)    # `created` of each served model


# `state` and `owner` are async: FastAPI runs a sync dependency in the threadpool, and at 200 polls/s
# each hop costs more than the whole database read.
async def state(request: Request) -> AppState:
    return request.app.state.blend


def session(st: Annotated[AppState, Depends(state)]) -> Iterator[Session]:
    with st.sessions() as s:
        yield s


async def read(st: AppState, fn: Callable[..., T], *args: Any) -> T:
    """Run fn(session, *args) in one threadpool hop, in a read-only session that is closed before it returns.

    For routes that only read: 200 polls a second must never queue behind, or
    delay, a result write (the read-only engine never takes SQLite's write lock).
    """
    def run() -> T:
        with st.read_sessions() as s:
            return fn(s, *args)

    return await run_in_threadpool(run)


async def owner(request: Request) -> str:
    """Who is calling: the tenant blendserve/api/auth.py settled from the headers before the body was read.
    With no keys configured everything belongs to "" (a loopback-only deployment)."""
    found = request.scope.get("state", {}).get("owner")
    if found is None:      # only the open doors get here without one, and they do not ask
        raise APIError(401, "You didn't provide an API key.", code="missing_api_key")
    return found


async def clean_params(request: Request) -> None:
    """A NUL in a path or query parameter is refused up front: PostgreSQL rejects NUL in any text parameter
    (a 500 from the driver), and no object id or filter value contains one."""
    for k, v in (*request.path_params.items(), *request.query_params.multi_items()):
        if "\x00" in k or "\x00" in str(v):
            raise APIError(400, f"Invalid value for '{k[:64]}': NUL characters are not allowed.",
                           param=k[:64].replace("\x00", ""), code="invalid_value")


StateDep = Annotated[AppState, Depends(state)]
SessionDep = Annotated[Session, Depends(session)]
OwnerDep = Annotated[str, Depends(owner)]
