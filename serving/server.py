"""Run the app under uvicorn: `run(host, port, controller)` for the CLI, `BackgroundServer` for tests and
the load benchmark (a real socket on 127.0.0.1, a random free port, its own thread, bounded start / stop).

`run` refuses to start half-configured: the listening socket is bound before anything is loaded (a port in use or a
host that does not resolve is a `ListenError` at once, not after the model and the store have been opened), and a
failed start-up (a store that cannot be opened, an unknown controller, a bad setting) raises its own error, which the
command line prints as one line, instead of uvicorn's traceback and exit status 3.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from types import TracebackType
from typing import Any

from fastapi import FastAPI

from controller.backend import Backend
from serving.app import create_app
from serving.errors import ListenError, SettingsError, StartupError
from serving.runtime import check_token_budget
from serving.settings import Settings, controller_options_error

log = logging.getLogger(__name__)


def listen(host: str, port: int) -> list[socket.socket]:
    """Bound sockets for every address `host` resolves to (as asyncio's `create_server` binds them), or ListenError."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as error:
        raise ListenError(f"cannot listen on {host}:{port}: the host does not resolve ({error})") from error
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):  # resolvers may repeat an address
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # its IPv4 twin is bound separately
            sock.bind(address)
    except OSError as error:
        for sock in sockets:
            sock.close()
        raise ListenError(f"cannot listen on {host}:{port}: {error.strerror or error}") from error
    return sockets


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _StartupGuard:
    """The app as uvicorn sees it from `run`: a failed lifespan start-up is kept here (raised by `run`) and reported
    to uvicorn without the traceback text it would log."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.error: BaseException | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def quiet(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "lifespan.startup.failed":
                message = {"type": message["type"], "message": ""}  # `run` raises the error itself, in one line
            await send(message)

        try:
            await self.app(scope, receive, quiet)
        except BaseException as error:
            self.error = error
            raise


def run(
    host: str | None = None,
    port: int | None = None,
    controller: str | Backend | None = None,
    *,
    log_level: str = "info",
    **overrides: Any,
) -> None:
    """Serve until interrupted. Settings come from `JEVMEM_*`, then these arguments; `controller` is a
    backend name or a ready `Backend`. SIGINT / SIGTERM drain the queue before exiting. Raises SettingsError,
    ListenError or the error that stopped the start-up (before serving anything)."""
    import uvicorn

    given = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    backend = controller if controller is not None and not isinstance(controller, str) else None
    if isinstance(controller, str):
        given["controller"] = controller
    settings = Settings.from_env(**given, **overrides)
    preflight(settings, backend)
    sockets = listen(settings.host, settings.port)
    try:
        guard = _StartupGuard(create_app(settings, backend=backend))
        config = uvicorn.Config(
            guard,
            host=settings.host,
            port=settings.port,
            log_level=log_level,
            lifespan="on",
            timeout_graceful_shutdown=max(1, int(settings.drain_timeout_s)),
            server_header=False,
        )
        server = _uvicorn_server(config)
        try:
            server.run(sockets=sockets)
        except KeyboardInterrupt:
            pass
        except SystemExit:  # uvicorn's exit on a failed start-up: the cause, when there is one, is raised below
            if guard.error is None:
                raise
    finally:
        for sock in sockets:
            sock.close()
    if guard.error is not None:
        raise guard.error
    if not server.started:
        raise StartupError("the server did not start (see the log above)")


def preflight(settings: Settings, backend: Backend | None = None) -> None:
    """What can be checked before the socket is bound and uvicorn logs its start: the controller is a registered
    backend and its options are ones it takes, with values it can use (unless `backend` is given ready), the
    memory store path is not a directory, and the token budget admits the warm-up request (counted with the base
    tokenizer, as for every controller: no weights are loaded). A `SettingsError` here is
    one line on the command line, with none of uvicorn's start-up log before it."""
    from controller.backend import available_backends, check_backend_options

    known = available_backends()
    if backend is None and settings.controller not in known:
        raise SettingsError(f"unknown controller {settings.controller!r}; available: {', '.join(known)}",
                            field="controller", value=settings.controller)
    if backend is None:
        try:
            check_backend_options(settings.controller, settings.controller_options)
        except TypeError as error:  # BackendOptionError (a TypeError): an option the backend does not take or cannot use
            setting = controller_options_error(settings, error)
            if setting is None:
                raise
            raise setting from error
    if settings.memory_db is not None and Path(settings.memory_db).is_dir():
        raise SettingsError(f"memory store {settings.memory_db} is a directory; name the store's file",
                            field="memory_db", value=settings.memory_db)
    check_token_budget(settings)
    if backend is None and settings.controller == "local" and settings.token_budget is not None:
        from controller.template import DEFAULT_MAX_REQUEST_TOKENS

        limit = settings.controller_options.get("max_request_tokens", DEFAULT_MAX_REQUEST_TOKENS)
        if settings.token_budget > limit:  # (the options were checked above: an int)
            log.warning("JEVMEM_TOKEN_BUDGET=%d is above the local controller's max_request_tokens (%d), which refuses a larger "
                        "request first: the budget has no effect past %d", settings.token_budget, limit, limit)


def _uvicorn_server(config: Any) -> Any:
    """uvicorn's server over sockets bound beforehand (`listen`), still logging where it listens once started."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                for sock in sockets or ():
                    address = sock.getsockname()
                    where = f"[{address[0]}]" if sock.family == socket.AF_INET6 else address[0]
                    logging.getLogger("uvicorn.error").info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", where, address[1])

    return Server(config)


class BackgroundServer:
    """`with BackgroundServer(app) as server: server.url` serves `app` on 127.0.0.1 in a daemon thread."""

    def __init__(self, app: FastAPI, *, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 30.0) -> None:
        import uvicorn

        self.app = app
        self._config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(self._config)
        self._thread = threading.Thread(target=self._server.run, name="jevmem-server", daemon=True)
        self._start_timeout_s = start_timeout_s
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + self._start_timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the server failed to start (see the log)")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the server did not start within {self._start_timeout_s:g}s")
            time.sleep(0.01)
        sockets = [s for server in self._server.servers for s in server.sockets]
        self.port = int(sockets[0].getsockname()[1])
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(5.0)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
