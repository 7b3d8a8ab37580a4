"""OpenAI-shaped errors: {"error": {"message", "type", "param", "code"}} with OpenAI's status codes."""
from __future__ import annotations

import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "invalid_request_error",
          404: "invalid_request_error", 409: "invalid_request_error", 413: "invalid_request_error",
          429: "requests", 500: "server_error", 503: "server_error"}


class APIError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or _TYPES.get(status, "invalid_request_error")
        self.headers = headers or {}


def not_found(kind: str, obj_id: str) -> APIError:
    return APIError(404, f"No {kind} found with id '{obj_id}'.", param="id", code="not_found")


_ID = re.compile(r"[A-Za-z0-9_\-]{1,64}")


def check_id(kind: str, obj_id: str) -> str:
    """Ids are ours (blendserve.core.ids.new_id): anything else is not found without asking the database, which on
    PostgreSQL would refuse a NUL or an unpaired surrogate in a parameter with a driver error (a 500)."""
    if not _ID.fullmatch(obj_id):
        raise APIError(404, f"No {kind} found with id {obj_id[:64]!a}.", param="id", code="not_found")
    return obj_id


def _body(status: int, message: str, param: str | None, code: str | None) -> dict:
    return {"error": {"message": message, "type": _TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        body = {"error": {"message": exc.message, "type": exc.type, "param": exc.param, "code": exc.code}}
        return JSONResponse(body, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
        param = ".".join(loc) or None
        msg = (f"Invalid value for '{param}': {err.get('msg', 'invalid')}" if param
               else err.get("msg", "Invalid request"))
        return JSONResponse(_body(400, msg, param, "invalid_value"), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else None
        return JSONResponse(_body(exc.status_code, str(exc.detail), None, code), status_code=exc.status_code)

    @app.exception_handler(RecursionError)
    async def _too_deep(_: Request, exc: RecursionError) -> JSONResponse:
        """A JSON body nested past the parser's depth (json.loads stops at Python's recursion limit): the
        caller's fault, named as such, never a 500."""
        return JSONResponse(_body(400, "The request body is nested too deeply.", None, "nested_too_deeply"),
                            status_code=400)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(_body(500, "The server had an error processing your request.", None, None),
                            status_code=500)
