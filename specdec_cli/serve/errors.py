"""The server's one error shape: `ApiError`, what each of specdec's errors becomes, and the handlers that send them.

Every answer other than 200 leaves as OpenAI's `{"error": {"message", "type", "param", "code"}}`
from `error_response`, whichever part raised it:

    from_specdec(BadSetting("top_p", "top_p must be in (0, 1], got 1.5"))
    -> ApiError(400, "top_p must be in (0, 1], got 1.5", param="top_p")
    error_response(that)
    -> 400 {"error": {"message": "top_p must be in (0, 1], got 1.5", "type": "invalid_request_error",
                      "param": "top_p", "code": null}}

The client's fault is a 400, a full queue or a server shutting down a 503 with Retry-After, a
server that cannot serve any more a 503, specdec's own fault a 500. `install_handlers` makes the
app answer so: an `ApiError` as it says, a missing route or method as 404/405 naming it, and any
other exception as a 500 for that request alone, logged with its traceback (the server goes on).

Left out: the JSON body itself (wire.error_body), which request fails how (body.py, app.py,
completions.py), the guard's refusals before any route (middleware.py).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import BadInput, SpecdecError
from ..options import BadSetting
from .guard import Refused
from .wire import error_body
from .jobs import InternalError, QueueFull, ShuttingDown, Unavailable

log = logging.getLogger("specdec")

RETRY_AFTER_SECONDS = 2


class ApiError(Exception):
    """An answer other than 200, in OpenAI's error shape."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None, code: str | None = None, headers: dict | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code, self.headers = status, message, type_, param, code, headers


def error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(error_body(exc.message, exc.type, exc.param, exc.code), status_code=exc.status, headers=exc.headers)


def from_specdec(exc: SpecdecError) -> ApiError:
    """The one mapping of specdec's errors to HTTP: the client's fault 400, a full queue 503, ours 500."""
    if isinstance(exc, BadSetting):
        return ApiError(400, exc.field_message, param=exc.setting)
    if isinstance(exc, BadInput):
        return ApiError(400, str(exc))
    if isinstance(exc, (QueueFull, ShuttingDown)):
        return ApiError(503, str(exc), "unavailable_error", headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    if isinstance(exc, Unavailable):
        return ApiError(503, str(exc), "unavailable_error")
    return ApiError(500, str(exc), "server_error", code="internal_error" if isinstance(exc, InternalError) else None)


def from_refused(exc: Refused) -> ApiError:
    """guard.py's refusal (a key, the Host or the Origin) as the answer it names."""
    return ApiError(exc.status, exc.message, code=exc.code)


def install_handlers(app: FastAPI) -> None:
    """Every error a route raises leaves through `error_response`, in the one shape."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        message = f"no route {request.method} {request.url.path}" if exc.status_code in (404, 405) else str(exc.detail)
        return error_response(ApiError(exc.status_code, message, code="not_found" if exc.status_code == 404 else None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(ApiError(500, f"internal error: {type(exc).__name__}", "server_error", code="internal_error"))
