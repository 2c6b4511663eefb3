"""The server edge: the only place where domain errors become HTTP responses.

    validation (FastAPI / envelope / controller InvalidRequestError)  422 {"detail": [{"loc", "msg", "type"}]}
    controller UnknownModelError                                      400 api_usage_error
    controller InputTooLongError                                      413 input_too_long
    controller BackendUnavailableError                                503 service_unavailable (+ retry-after)
    other controller errors                                           500 internal_error (logged, no trace)
    serving HTTPFacingError                                           its own status / error_type
    memory NodeNotFoundError (engine or store)                        404 not_found
    memory InvalidObservation / Query / Relation / LinkError         422 (validation shape)
    memory SystemTwoError                                             502 upstream_error
    store StoreUnavailableError (locked, disk full, I/O error)        503 store_unavailable (+ retry-after if locked)
    other memory / store errors                                       500 internal_error
    Starlette HTTPException (404 route, 405 method, 400 multipart)    its status, error shape
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from controller.errors import (
    BackendUnavailableError,
    ControllerError,
    InputTooLongError,
    InvalidRequestError,
    UnknownModelError,
    UnsupportedQuestionError,
)
from serving.errors import BEARER_CHALLENGE, HTTPFacingError, NothingStoredError, retry_headers
from serving.middleware import RouteEntry, mark_error

if TYPE_CHECKING:
    from memory.store.errors import StoreError, StoreUnavailableError

log = logging.getLogger(__name__)

_STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "overloaded_error",
}


def error_response(request: Request, status: int, error_type: str, message: str, *, retry_after_ms: int | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    mark_error(request.scope, error_type)
    out = {**(headers or {}), **retry_headers(retry_after_ms)}
    return JSONResponse({"detail": {"error_type": error_type, "message": message}}, status_code=status, headers=out)


def validation_response(request: Request, issues: list[dict[str, Any]]) -> JSONResponse:
    mark_error(request.scope, "validation_error")
    clean = []
    for issue in issues:
        msg = str(issue.get("msg", ""))
        ctx = issue.get("ctx")
        if issue.get("type") == "json_invalid" and isinstance(ctx, dict) and ctx.get("error") and str(ctx["error"]) not in msg:
            msg = f"{msg}: {ctx['error']}"
        loc = [p if isinstance(p, int) else str(p) for p in issue.get("loc", ())]
        clean.append({"loc": loc, "msg": msg, "type": str(issue.get("type", "value_error"))})
    return JSONResponse({"detail": clean}, status_code=422)


async def _on_validation(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    return validation_response(request, list(error.errors()))


async def _on_controller(request: Request, error: Exception) -> JSONResponse:
    if isinstance(error, UnknownModelError):
        return error_response(request, 400, "api_usage_error", error.message)
    if isinstance(error, InputTooLongError):
        return error_response(request, 413, "input_too_long", error.message)
    if isinstance(error, InvalidRequestError):
        kind = "unsupported" if isinstance(error, UnsupportedQuestionError) else "value_error"
        return validation_response(request, [{"loc": ["body", *error.loc], "msg": error.message, "type": kind}])
    if isinstance(error, BackendUnavailableError):
        log.warning("backend unavailable: %s", error)
        return error_response(request, 503, "service_unavailable", "the controller backend is unavailable; retry later", retry_after_ms=1000)
    log.error("controller failure: %r", error, exc_info=error)
    return error_response(request, 500, "internal_error", f"the controller failed to answer (request {_request_id(request)})")


async def _on_serving(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPFacingError)
    # RFC 9110 section 11.6.1: a 401 names the scheme the server takes.
    headers = {"WWW-Authenticate": BEARER_CHALLENGE} if error.status_code == 401 else None
    return error_response(request, error.status_code, error.error_type, error.message, retry_after_ms=error.retry_after_ms,
                          headers=headers)


async def _on_http(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    message = error.detail if isinstance(error.detail, str) else "request failed"
    error_type = _STATUS_TYPES.get(error.status_code, "internal_error" if error.status_code >= 500 else "invalid_request_error")
    headers = dict(error.headers or {})
    if error.status_code == 405:
        headers["Allow"] = _allowed_methods(request) or headers.get("Allow", "")
    return error_response(request, error.status_code, error_type, message, headers=headers)


def _allowed_methods(request: Request) -> str:
    """Every method some route of the path takes, HEAD routes left out of the schema included (Starlette's own 405
    names only the first route that matched)."""
    table: tuple[RouteEntry, ...] = getattr(request.app.state, "route_table", ())
    methods = {m for entry in table if entry.pattern.match(request.url.path) for m in entry.methods}
    return ", ".join(sorted(methods))


async def _on_memory(request: Request, error: Exception) -> JSONResponse:
    from memory.errors import (
        InvalidLinkError,
        InvalidObservationError,
        InvalidQueryError,
        InvalidRelationError,
        NodeNotFoundError,
        SystemTwoError,
    )
    from memory.store.errors import StoreUnavailableError

    if isinstance(error, NodeNotFoundError):  # the store's NodeNotFoundError is one too
        return error_response(request, 404, "not_found", str(error))
    if isinstance(error, (InvalidObservationError, InvalidQueryError, InvalidRelationError, InvalidLinkError)):
        return validation_response(request, [{"loc": ["body"], "msg": str(error), "type": "value_error"}])
    if isinstance(error, SystemTwoError):
        log.warning("System Two failed: %s", error)
        return error_response(request, 502, "upstream_error", "the answer model (System Two) failed; the evidence is still available without `answer`")
    if isinstance(error, StoreUnavailableError):
        log.warning("memory store unavailable: %s", error)
        return error_response(request, 503, "store_unavailable", _store_unavailable(error),
                              retry_after_ms=STORE_RETRY_MS if error.transient else None)
    log.error("memory engine failure: %r", error, exc_info=error)
    return error_response(request, 500, "internal_error", f"the memory engine failed (request {_request_id(request)})")


STORE_RETRY_MS = 1000  # a lock held by another writer is usually released within this


def _store_unavailable(error: StoreUnavailableError) -> str:
    """What a client is told of the failure: the database's reason, not the server's file path."""
    return f"the memory store could not complete the request ({error.reason}); retry later"


def nothing_stored(request: Request, error: StoreError, what: str) -> NothingStoredError:
    """The answer to an all-or-nothing write (`what`: "the batch of 3 observations") that failed in the store."""
    from memory.store.errors import StoreUnavailableError

    if isinstance(error, StoreUnavailableError):
        log.warning("memory store unavailable, nothing from %s stored: %s", what, error)
        return NothingStoredError(f"nothing from {what} was stored: {_store_unavailable(error)}", unavailable=True,
                                  retry_after_ms=STORE_RETRY_MS if error.transient else None)
    log.error("memory store failure, nothing from %s stored: %r", what, error, exc_info=error)
    return NothingStoredError(f"nothing from {what} was stored: the memory engine failed (request {_request_id(request)}); "
                              "it may be sent again", unavailable=False)


def _request_id(request: Request) -> str:
    return str(request.scope.get("state", {}).get("request_id", "-"))


def install_error_handlers(app: FastAPI) -> None:
    from memory.errors import MemoryEngineError  # store errors included (StoreError is a MemoryEngineError)

    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(ControllerError, _on_controller)
    app.add_exception_handler(HTTPFacingError, _on_serving)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(MemoryEngineError, _on_memory)
