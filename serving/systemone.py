"""`POST /v1/systemone` and `GET /v1/models`: the TypeSafe wire protocol over the batching pipeline."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from controller.client import finish_request, wire_payload
from controller.models import listed_models
from serving.runtime import Runtime, get_runtime
from serving.wire import INLINE_BODY_BYTES, ErrorResponse, ModelList, SystemOneResponse, ValidationErrorResponse, read_systemone_body

router = APIRouter(tags=["System One"])
TRUNCATED_HEADER = "x-jevmem-truncated-tokens"

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Unknown model (`api_usage_error`) or an unreadable body."},
    401: {"model": ErrorResponse, "description": "Wrong API key."},
    403: {"model": ErrorResponse, "description": "Missing API key."},
    413: {"model": ErrorResponse, "description": "Body over the size limit, or input over the token budget."},
    415: {"model": ErrorResponse, "description": "Unsupported content type or content encoding."},
    422: {"model": ValidationErrorResponse, "description": "Validation failure."},
    429: {"model": ErrorResponse, "description": "Overloaded; retry after `retry-after-ms`."},
    503: {"model": ErrorResponse, "description": "Not ready, backend unavailable, or no answer within the deadline; retry."},
}

REQUEST_BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "JSON; bodies may be sent with `Content-Encoding: zstd`. Multipart bodies carry the JSON "
        "in a `request` part (image assets in `asset-N` parts are refused by this text model).",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SystemOneRequest"}}},
    }
}


@router.post(
    "/v1/systemone",
    response_model=SystemOneResponse,
    responses=_ERRORS,
    openapi_extra=REQUEST_BODY_DOC,
    summary="Answer typed questions (Noul, Choice, Score) about a state",
)
async def system_one(request: Request, runtime: Runtime = Depends(get_runtime)) -> JSONResponse:
    body = await read_systemone_body(request, runtime.settings.max_body_bytes)
    assets = body.envelope.assets
    if not assets and body.asset_parts:
        assets = {name: {"type": "image", "part": name} for name in body.asset_parts}
    planned = await runtime.plan(
        body.payload["state"], body.payload["questions"], model=body.envelope.model, assets=assets, in_thread=body.size > INLINE_BODY_BYTES
    )
    assert runtime.batcher is not None
    result = await runtime.batcher.submit(planned.request, runtime.settings.request_timeout_s,
                                          arrived=getattr(request.state, "arrived", None))
    response = finish_request(planned, result)
    # Reported, never silent: a backend serving with an opt-in overflow policy cut this request's state.
    headers = {TRUNCATED_HEADER: str(result.truncated_tokens)} if result.truncated_tokens else None
    return JSONResponse(wire_payload(response.model, response.answers, response.usage), headers=headers)


@router.head("/v1/models", include_in_schema=False)  # GET without the body, for uptime checks (as /healthz)
@router.get(
    "/v1/models",
    response_model=ModelList,
    responses={k: v for k, v in _ERRORS.items() if k in (401, 403, 503)},
    summary="The served model and its aliases",
)
async def models(runtime: Runtime = Depends(get_runtime)) -> JSONResponse:
    assert runtime.backend is not None
    entries = [{"name": m.name, "description": m.description, "release_date": m.release_date} for m in listed_models(runtime.backend.info)]
    return JSONResponse({"models": entries})
