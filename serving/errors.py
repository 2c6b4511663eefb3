"""Errors of the serving package. Each HTTP-facing error knows its status and wire `error_type`.

    ServingError                         root of every serving failure
    ├── SettingsError                    a setting / JEVMEM_* variable is invalid (field, value)
    ├── ListenError                      `serve` cannot listen where it was told to (address in use, bad host)
    ├── StartupError                     `serve` stopped during start-up for a reason uvicorn did not raise
    └── HTTPFacingError                  becomes `{"detail": {"error_type", "message"}}` at the edge
        ├── AuthenticationError          missing key (403) or wrong key (401)
        ├── PayloadTooLargeError         body over the limit, on the wire or decompressed (413)
        ├── UnsupportedMediaTypeError    a content type or content encoding the server cannot read (415)
        ├── BadEncodingError             a body that does not decode as its Content-Encoding says (400)
        ├── OverloadedError              the queue is full (429, retry-after)
        ├── RequestTimeoutError          no answer within the server's deadline (503, retry-after)
        ├── NotReadyError                starting up or shutting down (503, retry-after)
        ├── NotFoundError                no such resource (404)
        ├── MemoryUnavailableError       the memory engine is not configured or failed to open (503)
        └── NothingStoredError           an all-or-nothing write failed in the store (503 store unavailable, else 500)

Controller and memory domain errors keep their own types; `serving.edge` maps them to responses.
"""

from __future__ import annotations

import math


class ServingError(Exception):
    """Root of all serving errors."""


class SettingsError(ServingError, ValueError):
    def __init__(self, message: str, *, field: str | None = None, value: object = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


class ListenError(ServingError, OSError):
    """The server cannot listen where it was told to (address in use, a host that does not resolve, no permission)."""


class StartupError(ServingError):
    """The server stopped during start-up for a reason uvicorn reported but did not raise."""


class HTTPFacingError(ServingError):
    status_code: int = 500
    error_type: str = "internal_error"

    def __init__(self, message: str, *, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_ms = retry_after_ms


def retry_headers(retry_after_ms: int | None) -> dict[str, str]:
    """`retry-after-ms` and the whole-second `retry-after` (at least 1) of an error that may be retried."""
    if retry_after_ms is None:
        return {}
    return {"retry-after-ms": str(int(retry_after_ms)), "retry-after": str(max(1, math.ceil(retry_after_ms / 1000)))}


BEARER_CHALLENGE = 'Bearer realm="jevmem"'  # the WWW-Authenticate value of a 401


class AuthenticationError(HTTPFacingError):
    error_type = "authentication_error"

    def __init__(self, message: str, *, missing: bool) -> None:
        super().__init__(message)
        self.status_code = 403 if missing else 401


class PayloadTooLargeError(HTTPFacingError):
    status_code = 413
    error_type = "request_too_large"

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class UnsupportedMediaTypeError(HTTPFacingError):
    status_code = 415
    error_type = "unsupported_media_type"


class BadEncodingError(HTTPFacingError):
    status_code = 400
    error_type = "invalid_request_error"


class OverloadedError(HTTPFacingError):
    status_code = 429
    error_type = "overloaded_error"


class RequestTimeoutError(HTTPFacingError):
    status_code = 503
    error_type = "timeout_error"

    @classmethod
    def while_reading(cls, timeout_s: float, retry_after_ms: int) -> RequestTimeoutError:
        """The deadline passed before the request was read whole (a slow upload, a long parse)."""
        return cls(f"no answer within the server's deadline of {timeout_s:g}s (it passed while the request was read); "
                   "retry later", retry_after_ms=retry_after_ms)


class NotReadyError(HTTPFacingError):
    status_code = 503
    error_type = "service_unavailable"


class NotFoundError(HTTPFacingError):
    status_code = 404
    error_type = "not_found"


class MemoryUnavailableError(HTTPFacingError):
    status_code = 503
    error_type = "memory_unavailable"


class NothingStoredError(HTTPFacingError):
    """A write that is all or nothing (a batch) failed in the memory store, so nothing of it was stored and the
    same request may be sent again: 503 `store_unavailable` when the store is unavailable, else 500."""

    def __init__(self, message: str, *, unavailable: bool, retry_after_ms: int | None = None) -> None:
        super().__init__(message, retry_after_ms=retry_after_ms)
        self.status_code = 503 if unavailable else 500
        self.error_type = "store_unavailable" if unavailable else "internal_error"
