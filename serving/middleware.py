"""Pure ASGI middleware: request context (request id, metrics, last-resort 500) and body handling.

`RequestContextMiddleware` sits outside everything the app does, so every response, including errors
raised by other middleware and unexpected exceptions, carries `x-typesafe-request-id` and is counted.
`BodyMiddleware` enforces the body size limit on the wire and after decompression (and the request deadline
while the body arrives: a stalled upload is a 503, not a hang), decodes
`Content-Encoding: zstd`, and hands the app a plain identity-encoded body.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serving.errors import RequestTimeoutError, retry_headers
from serving.metrics import ServerMetrics

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-typesafe-request-id"
_NO_BODY_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_ERROR_TYPES = {400: "invalid_request_error", 404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}
# Metric label values come from fixed sets: any HTTP token is a legal method, and a label per client-chosen
# method would grow the metrics without bound.
_METHOD_LABELS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def mark_error(scope: Scope, error_type: str) -> None:
    """Record the wire `error_type` of the response being sent, for the error counter."""
    scope.setdefault("state", {})["error_type"] = error_type


def json_error_body(error_type: str, message: str) -> bytes:
    return json.dumps({"detail": {"error_type": error_type, "message": message}}, ensure_ascii=False).encode("utf-8")


async def send_error(scope: Scope, send: Send, status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> None:
    """Send a complete `{"detail": {"error_type", "message"}}` response from middleware."""
    mark_error(scope, error_type)
    body = json_error_body(error_type, message)
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body, "more_body": False})


@dataclass(frozen=True)
class RouteEntry:
    """One route as `route_label` and the 405's Allow header see it: its path template and methods."""

    template: str
    pattern: re.Pattern[str]
    methods: frozenset[str]


def route_table(routers: Iterable[Any]) -> tuple[RouteEntry, ...]:
    """The routes of the app's routers (FastAPI's own route list holds included routers as opaque entries),
    HEAD routes left out of the schema included."""
    return tuple(RouteEntry(route.path, route.path_regex, frozenset(m.upper() for m in route.methods))
                 for router in routers for route in router.routes
                 if getattr(route, "methods", None) and getattr(route, "path_regex", None) is not None)


def route_label(scope: Scope) -> str:
    """The path template of the route that took the request, for metric labels (never the raw path: one label per
    client-chosen path would grow the metrics without bound). A request answered before routing (by
    `BodyMiddleware`: 413, 415, a stalled body) is matched against the app's route table; "unmatched" when no
    route has its path."""
    path = getattr(scope.get("route"), "path", None)
    if path:
        return str(path)
    table: tuple[RouteEntry, ...] = getattr(getattr(scope.get("app"), "state", None), "route_table", ())
    method = str(scope.get("method", "")).upper()
    matching = [entry for entry in table if entry.pattern.match(str(scope.get("path", "")))]
    for entry in matching:
        if method in entry.methods:
            return entry.template
    return matching[0].template if matching else "unmatched"


class RequestContextMiddleware:
    """Request id on every response, request / latency / error metrics, and a JSON 500 of last resort."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = "req_" + uuid.uuid4().hex
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        state["arrived"] = time.monotonic()  # the request deadline counts from here, body reading included
        started = time.perf_counter()
        status = 499  # counted when no response goes out: the client hung up before its body was in (nginx's code)
        response_started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                response_started = True
                status = int(message["status"])
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_with_id)
        except Exception:  # noqa: BLE001 - the edge of the server: log it, never leak a stack trace
            log.exception("unhandled error in %s %s (request %s)", scope.get("method"), scope.get("path"), request_id)
            if not response_started:
                await send_error(scope, send_with_id, 500, "internal_error", f"internal server error (request {request_id})")
        finally:
            self.metrics.in_flight.dec()
            label = route_label(scope)
            method = str(scope.get("method", ""))
            self.metrics.requests.inc(route=label, method=method if method in _METHOD_LABELS else "other", status=str(status))
            self.metrics.latency.observe(time.perf_counter() - started, route=label)
            if status >= 400 and response_started:
                error_type = scope.get("state", {}).get("error_type") or _DEFAULT_ERROR_TYPES.get(status, f"http_{status}")
                self.metrics.errors.inc(error_type=error_type)


class BodyMiddleware:
    """Reads the whole body (bounded in size, and in time by the request deadline), decodes
    `Content-Encoding: zstd`, and replays it to the app."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in _NO_BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        limit = self.max_bytes
        declared = headers.get("content-length")
        if declared is not None:
            if not (declared.isascii() and declared.strip().isdigit()):  # isdigit alone takes "²", which int() refuses
                await send_error(scope, send, 400, "invalid_request_error", "Content-Length is not a number")
                return
            digits = declared.strip().lstrip("0") or "0"
            if len(digits) > len(str(limit)) or int(digits) > limit:  # int() refuses over 4300 digits (ValueError)
                size = f"{digits} bytes" if len(digits) <= 20 else f"a {len(digits)}-digit number of bytes"
                await send_error(scope, send, 413, "request_too_large", f"request body of {size} exceeds the limit of {limit} bytes")
                return
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("identity", "", "zstd"):
            await send_error(scope, send, 415, "unsupported_media_type", f"Content-Encoding {encoding!r} is not supported; use zstd or none")
            return
        try:
            async with asyncio.timeout(self._time_left(scope)):
                body = await _read_body(receive, limit)
        except TimeoutError:
            # A body that stalls would otherwise hold the request open for as long as the client likes.
            error = RequestTimeoutError.while_reading(self.timeout_s or 0.0, retry_after_ms=1000)
            await send_error(scope, send, error.status_code, error.error_type, error.message, retry_headers(error.retry_after_ms))
            return
        except _TooLarge:
            await send_error(scope, send, 413, "request_too_large", f"request body exceeds the limit of {limit} bytes")
            return
        if body is None:  # the client hung up
            return
        if encoding == "zstd":
            try:
                body = _zstd_decode(body, limit)
            except _TooLarge:
                await send_error(scope, send, 413, "request_too_large", f"decompressed request body exceeds the limit of {limit} bytes")
                return
            except ValueError as error:
                await send_error(scope, send, 400, "invalid_request_error", f"request body is not valid zstd: {error}")
                return
            scope["headers"] = [
                (k, v) for k, v in scope.get("headers", []) if k.lower() not in (b"content-encoding", b"content-length")
            ] + [(b"content-length", str(len(body)).encode())]
        await self.app(scope, _replay(body, receive), send)

    def _time_left(self, scope: Scope) -> float | None:
        """Seconds until the request deadline (counted from arrival, as the batcher counts it), or None."""
        if self.timeout_s is None:
            return None
        arrived = scope.get("state", {}).get("arrived", time.monotonic())
        return max(0.0, arrived + self.timeout_s - time.monotonic())


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None when the client disconnects first; raises _TooLarge past `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge()
        chunks.append(chunk)
        more = bool(message.get("more_body", False))
    return b"".join(chunks)


class _TooLarge(Exception):
    pass


def _zstd_decode(data: bytes, limit: int) -> bytes:
    """Decompress every frame of `data`, refusing output over `limit` bytes and truncated frames.

    Two passes, so that memory stays within about twice `limit` whatever the input. The first reads at most
    `limit + 1` bytes through a stream reader: a zstd bomb (one 1 KiB piece can expand to ~32 MiB) stops there.
    The second, run only on a body known to fit, decodes frame by frame to find truncated frames, which the
    stream reader does not report.
    """
    import zstandard

    if not data:
        raise ValueError("empty body")
    dctx = zstandard.ZstdDecompressor()
    try:
        with dctx.stream_reader(data, read_size=_ZSTD_PIECE, read_across_frames=True) as reader:
            if len(reader.read(limit + 1)) > limit:
                raise _TooLarge()
        out = bytearray()
        obj = dctx.decompressobj()
        view = memoryview(data)
        pos = 0
        while pos < len(data):
            piece = view[pos : pos + _ZSTD_PIECE]
            pos += len(piece)
            out += obj.decompress(piece)
            if obj.eof:
                pos -= len(obj.unused_data)  # the next frame starts inside this piece
                if pos < len(data):
                    obj = dctx.decompressobj()
    except zstandard.ZstdError as error:
        raise ValueError(str(error)) from error
    if not obj.eof:
        raise ValueError("truncated zstd frame")
    if len(out) > limit:  # the passes agree on a valid body; this guards the bound itself
        raise _TooLarge()
    return bytes(out)


_ZSTD_PIECE = 1024


def _replay(body: bytes, receive: Receive) -> Any:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
