"""The HTTP side of a teacher run that the SDK leaves open: a cap on what is read, and Retry-After for any status.

Imports httpx2 only when a client is made (nothing heavy at import).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import lru_cache
from typing import Any


class BodyTooLarge(Exception):
    """A response body over the limit: not an httpx2 error, so the SDK does not retry it (and `distill` stops)."""


@lru_cache(maxsize=1)
def capped_client() -> type:
    """An `httpx2.Client` class taking `max_body` (bytes) and `body_seconds`: a response whose body is longer (as
    sent, or decoded), or still arriving that long after its headers, raises `BodyTooLarge` / `httpx2.ReadTimeout` instead of being read
    on (into memory, or for ever: the read timeout is per read, and a body streamed without end never hits it)."""
    import httpx2

    class CappedStream(httpx2.SyncByteStream):
        def __init__(self, stream: Any, request: Any, max_body: int, body_seconds: float) -> None:
            self.stream, self.request, self.max_body, self.body_seconds = stream, request, max_body, body_seconds

        def __iter__(self) -> Any:
            size, deadline = 0, time.monotonic() + self.body_seconds
            for chunk in self.stream:
                size += len(chunk)
                if size > self.max_body:
                    raise BodyTooLarge(f"a response body over {self.max_body} bytes")
                if time.monotonic() > deadline:
                    raise httpx2.ReadTimeout(f"the response body was still arriving {self.body_seconds:g}s after its headers",
                                             request=self.request)
                yield chunk

        def close(self) -> None:
            self.stream.close()

    class CappedClient(httpx2.Client):
        def __init__(self, *, max_body: int, body_seconds: float, **kw: Any) -> None:
            super().__init__(**kw)
            self.max_body, self.body_seconds = max_body, body_seconds

        def send(self, request: Any, *, stream: bool = False, **kw: Any) -> Any:
            response = super().send(request, stream=True, **kw)
            try:
                length = int(response.headers.get("content-length") or 0)
            except ValueError:
                length = 0
            try:
                if length > self.max_body:
                    raise BodyTooLarge(f"a response body of {length} bytes (at most {self.max_body} are read)")
                response.stream = CappedStream(response.stream, request, self.max_body, self.body_seconds)
                if not stream:  # decoded, counted again: a few KiB of gzip can be gigabytes
                    size, chunks = 0, []
                    for chunk in response.iter_bytes():
                        size += len(chunk)
                        if size > self.max_body:
                            raise BodyTooLarge(f"a response body over {self.max_body} bytes once decoded")
                        chunks.append(chunk)
                    response._content = b"".join(chunks)  # what `response.read()` keeps (it reads without a limit)
            except BaseException:
                response.close()
                raise
            return response

    return CappedClient


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a `retry-after-ms` or `retry-after` header asks for (a number or an HTTP date), or None."""
    from email.utils import parsedate_to_datetime

    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = (headers.get(name) or "").strip()
        if not raw:
            continue
        try:
            seconds = float(raw) * scale
        except ValueError:
            try:
                seconds = parsedate_to_datetime(raw).timestamp() - time.time()
            except (TypeError, ValueError, OverflowError):
                continue
        if seconds == seconds:  # not NaN
            return max(0.0, seconds)
    return None
