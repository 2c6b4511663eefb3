"""`create_app(settings)`: the FastAPI application (System One wire protocol, memory API, operations).

    app = create_app(Settings.from_env())      # or create_app() for the same
    uvicorn.run(app, host=..., port=...)       # or serving.server.run(host, port, controller)

Backend and engine are built in the lifespan and kept on `app.state.runtime`; a prebuilt `backend` (or
memory `engine`) may be handed in instead, and is then not closed by the app.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from controller.backend import Backend
from serving.auth import auth_dependencies
from serving.edge import install_error_handlers
from serving.middleware import BodyMiddleware, RequestContextMiddleware, route_table
from serving.runtime import Runtime
from serving.settings import Settings

API_VERSION = "0.1.0"


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    runtime: Runtime = app.state.runtime
    try:
        await runtime.start()
        yield
    finally:
        await runtime.stop()


def create_app(settings: Settings | None = None, *, backend: Backend | None = None, engine: Any = None) -> FastAPI:
    """Build the app. `settings` defaults to `Settings.from_env()`."""
    from serving import health, memory_api, systemone

    settings = settings or Settings.from_env()
    runtime = Runtime(settings, backend=backend, _memory_engine=engine)
    app = FastAPI(
        title="jevmem-local",
        version=API_VERSION,
        summary="Offline System One controller (TypeSafe wire protocol) and the Jev-Mem memory API.",
        lifespan=_lifespan,
    )
    app.state.settings = settings
    app.state.runtime = runtime
    install_error_handlers(app)
    # add_middleware puts the last one outermost: the request context wraps the body handling.
    app.add_middleware(BodyMiddleware, max_bytes=settings.max_body_bytes, timeout_s=settings.request_timeout_s)
    app.add_middleware(RequestContextMiddleware, metrics=runtime.metrics)
    guarded = auth_dependencies(settings.api_key)
    routers = [health.router, systemone.router]
    app.include_router(health.router)
    app.include_router(systemone.router, dependencies=guarded)
    if settings.memory_db is not None or engine is not None:
        app.include_router(memory_api.router, dependencies=guarded)
        routers.append(memory_api.router)
    app.state.route_table = route_table(routers)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema plus the System One request model (its body is read by hand: JSON, zstd, multipart).
    Once the backend is loaded, `model` lists the names this server accepts."""
    if app.openapi_schema is None:
        from controller.models import listed_models
        from serving.wire import SystemOneRequest

        schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        request_schema = SystemOneRequest.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in request_schema.pop("$defs", {}).items():
            components.setdefault(name, definition)
        components["SystemOneRequest"] = request_schema
        backend = app.state.runtime.backend
        if backend is None:
            return schema  # not cached: the model names are known after start-up
        request_schema["properties"]["model"]["enum"] = [m.name for m in listed_models(backend.info)]
        app.openapi_schema = schema
    return app.openapi_schema
