"""Run the app under uvicorn: `run(host, port, controller)` for the CLI, `BackgroundServer` for tests and
the load benchmark (a real socket on 127.0.0.1, a random free port, its own thread, bounded start / stop)."""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Any

from fastapi import FastAPI

from controller.backend import Backend
from serving.app import create_app
from serving.settings import Settings

log = logging.getLogger(__name__)


def run(
    host: str | None = None,
    port: int | None = None,
    controller: str | Backend | None = None,
    *,
    log_level: str = "info",
    **overrides: Any,
) -> None:
    """Serve until interrupted. Settings come from `JEVMEM_*`, then these arguments; `controller` is a
    backend name or a ready `Backend`. SIGINT / SIGTERM drain the queue before exiting."""
    import uvicorn

    given = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    backend = controller if controller is not None and not isinstance(controller, str) else None
    if isinstance(controller, str):
        given["controller"] = controller
    settings = Settings.from_env(**given, **overrides)
    app = create_app(settings, backend=backend)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        timeout_graceful_shutdown=max(1, int(settings.drain_timeout_s)),
        server_header=False,
    )


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
