"""Serving fixtures: apps over deterministic backends, the official SDK through in-process transports, and a
live uvicorn on 127.0.0.1 (random free port, bounded start and stop)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio.from_thread
import httpx2
import pytest
from fastapi import FastAPI

from controller.backend import Backend, create_backend
from serving import Settings, create_app
from serving.server import BackgroundServer
from tests.serving.fakes import FakeBackend

NOUL = {"type": "noul", "instructions": "Is the customer asking for money back?"}
CHOICE = {
    "type": "choice",
    "instructions": "Which team should handle this ticket?",
    "criteria": {"Billing": "Payments, invoices, refunds", "Technical": "Bugs, outages", "Sales": None},
}
SCORE = {"type": "score", "instructions": "How frustrated is the customer?", "criteria": ["Calm", "Frustrated", "Very angry"]}
TICKET = "I was charged twice for my March invoice and the refund has not arrived. Please fix this today."


def body(questions: dict[str, Any] | None = None, state: Any = TICKET, model: str = "jev-latest", **extra: Any) -> dict[str, Any]:
    return {"model": model, "state": state, "questions": {"refund": NOUL} if questions is None else questions, **extra}


@pytest.fixture(scope="session")
def heuristic() -> Iterator[Backend]:
    """The repo's weight-free backend, built once (it is deterministic and thread-safe)."""
    backend = create_backend("heuristic")
    yield backend
    backend.close()


@pytest.fixture
def fake() -> FakeBackend:
    return FakeBackend()


@asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[httpx2.AsyncClient]:
    """Run the app's lifespan and yield a client bound to it through `httpx2.ASGITransport`."""
    async with app.router.lifespan_context(app):
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://local") as client:
            yield client


@pytest.fixture
def make_app(fake: FakeBackend) -> Callable[..., FastAPI]:
    def make(backend: Backend | None = None, engine: Any = None, **settings: Any) -> FastAPI:
        return create_app(Settings(**settings), backend=backend or fake, engine=engine)

    return make


@pytest.fixture
async def client(make_app: Callable[..., FastAPI]) -> AsyncIterator[httpx2.AsyncClient]:
    async with serving(make_app()) as c:
        yield c


async def raw_post(app: FastAPI, path: str, headers: list[tuple[bytes, bytes]], content: bytes = b"{}") -> list[dict[str, Any]]:
    """The ASGI messages `app` sends for a POST whose headers no HTTP client would send (a Content-Length that is
    not a number, thousands of digits long): straight through the ASGI interface, app lifespan included."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": content, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http", "path": path,
             "raw_path": path.encode(), "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1), "server": ("local", 80),
             "headers": headers}  # fmt: skip
    async with serving(app):
        await app(scope, receive, send)
    return sent


class ASGIBridge(httpx2.BaseTransport):
    """A sync httpx2 transport that runs each request through the ASGI app on a blocking portal's loop."""

    def __init__(self, app: FastAPI, portal: anyio.from_thread.BlockingPortal) -> None:
        self._transport = httpx2.ASGITransport(app=app)
        self._portal = portal
        self.seen: list[httpx2.Headers] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        content = request.read()
        self.seen.append(request.headers)

        async def call() -> tuple[int, httpx2.Headers, bytes]:
            forwarded = httpx2.Request(request.method, request.url, headers=request.headers, content=content)
            response = await self._transport.handle_async_request(forwarded)
            return response.status_code, response.headers, await response.aread()

        status, headers, data = self._portal.call(call)
        return httpx2.Response(status, headers=headers, content=data, request=request)


@contextmanager
def bridged(app: FastAPI) -> Iterator[ASGIBridge]:
    """The app's lifespan on a portal thread, and a sync transport into it."""
    with anyio.from_thread.start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(app.router.lifespan_context(app)):
            yield ASGIBridge(app, portal)


class Recording(httpx2.AsyncBaseTransport):
    """Wraps an async transport and keeps the request headers, to see what the SDK put on the wire."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner
        self.seen: list[tuple[httpx2.Headers, int]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        content = await request.aread()
        self.seen.append((request.headers, len(content)))
        return await self.inner.handle_async_request(request)


@pytest.fixture(scope="module")
def live_server() -> Iterator[BackgroundServer]:
    """A real uvicorn on 127.0.0.1 over the heuristic backend (module-scoped: start-up costs ~0.2 s)."""
    with BackgroundServer(create_app(Settings(controller="heuristic"))) as server:
        yield server
