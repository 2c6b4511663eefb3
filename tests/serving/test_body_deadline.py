"""The request deadline bounds the body upload too: a body that stops arriving is answered 503 (retry-after)
when the deadline passes, instead of holding the request open for as long as the client keeps the socket."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.serving.conftest import serving
from tests.serving.fakes import FakeEngine


def _scope(path: str) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http", "path": path,
            "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": [(b"content-type", b"application/json"),
            (b"content-length", b"100")], "client": ("127.0.0.1", 1), "server": ("local", 80)}  # fmt: skip


@pytest.mark.parametrize("path", ["/v1/systemone", "/v1/memory/observations"])
async def test_a_stalled_body_is_answered_at_the_deadline(make_app: Any, path: str) -> None:
    engine = FakeEngine()
    app = make_app(engine=engine, request_timeout_s=0.3, warmup=False)
    first = True
    sent: list[Any] = []

    async def receive() -> Any:  # ten bytes of the declared hundred, then nothing (the client neither sends nor hangs up)
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": b'{"content"', "more_body": True}
        await asyncio.Event().wait()

    async def send(message: Any) -> None:
        sent.append(message)

    async with serving(app):
        await asyncio.wait_for(app(_scope(path), receive, send), timeout=5.0)  # used to wait forever
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    assert start["status"] == 503 and headers["retry-after"] == "1" and "x-typesafe-request-id" in headers
    assert b'"timeout_error"' in b"".join(m.get("body", b"") for m in sent)
    assert engine.nodes == {}
