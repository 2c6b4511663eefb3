"""Liveness, readiness and Prometheus metrics. Always open (no API key).

Each also answers HEAD (load balancers and uptime checks send it; FastAPI's API routes take GET only): the same
endpoint, so the status and headers are GET's, and the server (uvicorn) sends no body. The schema documents GET.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel

from serving.edge import error_response
from serving.metrics import CONTENT_TYPE
from serving.runtime import Runtime

router = APIRouter(tags=["Operations"])


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str
    model: str
    batching: bool
    queue_depth: int


@router.head("/healthz", include_in_schema=False)
@router.get("/healthz", response_model=Health, summary="Liveness: the process answers")
async def healthz() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@router.head("/readyz", include_in_schema=False)
@router.get("/readyz", response_model=Readiness, responses={503: {"description": "Not ready (loading, warming up or shutting down)."}}, summary="Readiness: model loaded and warmed")
async def readyz(request: Request) -> JSONResponse:
    runtime: Runtime = request.app.state.runtime
    if runtime.backend is None or runtime.batcher is None or not await runtime.maybe_warm_up():
        return error_response(request, 503, "service_unavailable", "not ready", retry_after_ms=1000)
    return JSONResponse(
        {"status": "ready", "model": runtime.backend.info.name, "batching": runtime.settings.batching, "queue_depth": runtime.batcher.depth}
    )


@router.head("/metrics", include_in_schema=False)
@router.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics (text format 0.0.4)")
async def metrics(request: Request) -> PlainTextResponse:
    runtime: Runtime = request.app.state.runtime
    if runtime.batcher is not None:
        runtime.metrics.queue_depth.set(runtime.batcher.depth)
    return PlainTextResponse(runtime.metrics.render(), media_type=CONTENT_TYPE)
