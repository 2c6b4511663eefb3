"""The memory API: one router over the engine facade (write, query, get, edit, link / unlink, delete, relink,
stats).

Every engine call runs on the memory thread (`MemoryService`). JSON bodies are parsed strictly (no NaN /
Infinity, no lone surrogates, bounded nesting) by `StrictJSONRoute`, so stored text is always valid
Unicode and every answer can be encoded. Unknown nodes are 404, invalid input 422, an unavailable store 503 (see
`serving.edge`); a busy engine is 429 (too many calls waiting) or 503 `timeout_error` (a call that could not start
within the request deadline was dropped unrun), both with retry-after (see `MemoryService`).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from memory.errors import NodeNotFoundError
from memory.store.errors import StoreError
from serving.edge import nothing_stored
from serving.memory_schemas import (
    BatchWriteIn,
    BatchWriteOut,
    EdgeOut,
    EditIn,
    LinkIn,
    NodeId,
    NodeViewOut,
    ObservationIn,
    QueryIn,
    QueryOut,
    Relation,
    RelinkIn,
    RelinkOut,
    SetLinksIn,
    StatsOut,
    WriteResultOut,
)
from serving.errors import NotFoundError, UnsupportedMediaTypeError
from serving.runtime import RequestMemory, get_request_memory
from serving.wire import ErrorResponse, ValidationErrorResponse, is_json_media, media_type, parse_json_off_loop


class _Unparsed:
    """What `StrictJSONRequest.json()` returns for a body that is not strict JSON: no body model accepts it."""


class StrictJSONRequest(Request):
    """`json()` parses strictly and keeps a failure in `parse_error` instead of raising it: FastAPI reads the body
    before it runs the router's dependencies, so a raise here would answer a caller without a key with 422 and the
    body's faults, where a schema-invalid body gets 403."""

    parse_error: RequestValidationError | None = None

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = await parse_json_off_loop(await self.body())
            except RequestValidationError as error:
                self.parse_error = error
                self._json = _Unparsed()
        return self._json


class StrictJSONRoute(APIRoute):
    """Strict JSON bodies of the media types /v1/systemone reads as JSON (`serving.wire.is_json_media`: none given,
    text/json too); another type is 415. The body's errors are reported after the dependencies (the API key) have
    passed."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            scope = request.scope
            media = media_type(request)
            if is_json_media(media) and not _is_json(media):  # JSON FastAPI would not parse (text/json): named as it parses
                scope = {**scope, "headers": [(k, b"application/json" if k.lower() == b"content-type" else v)
                                              for k, v in scope.get("headers", [])]}
            strict_request = StrictJSONRequest(scope, request.receive)
            try:
                return await handler(strict_request)
            except RequestValidationError as error:
                if strict_request.parse_error is not None:
                    raise strict_request.parse_error from error.__cause__
                media = media_type(strict_request)
                if await strict_request.body() and not _is_json(media):
                    raise UnsupportedMediaTypeError(f"content type {media!r} is not supported; send application/json") from error
                raise

        return strict


def _is_json(media: str) -> bool:
    """What FastAPI reads as JSON (with `strict_content_type` off, no Content-Type at all included)."""
    return media == "" or media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "Wrong API key."},
    403: {"model": ErrorResponse, "description": "Missing API key."},
    404: {"model": ErrorResponse, "description": "No such node."},
    413: {"model": ErrorResponse, "description": "Body over the size limit."},
    415: {"model": ErrorResponse, "description": "A body that is not JSON."},
    422: {"model": ValidationErrorResponse, "description": "Invalid input."},
    429: {"model": ErrorResponse, "description": "Too many memory calls waiting; retry after `retry-after-ms`."},
    503: {"model": ErrorResponse, "description": "The memory engine or its store is not available, or the engine was too busy to "
          "start the call within the request deadline (nothing was changed); retry later."},
}

EXPORT_MEDIA_TYPE = "application/x-ndjson"

# `NodeId = Path()` would drop NodeId's length bounds (FastAPI keeps only the Path's own): annotate instead.
NodePath = Annotated[NodeId, Path()]
NodeQuery = Annotated[NodeId, Query()]

router = APIRouter(
    prefix="/v1/memory", tags=["Memory"], route_class=StrictJSONRoute, responses=_ERRORS, strict_content_type=False
)
Memory = Depends(get_request_memory)


@router.post("/observations", status_code=201, response_model=WriteResultOut, summary="Write one observation")
async def write_observation(body: ObservationIn, memory: RequestMemory = Memory) -> WriteResultOut:
    result = await memory.call(lambda engine: engine.write(body.to_observation()))
    return WriteResultOut.of(result)


@router.post("/observations/batch", status_code=201, response_model=BatchWriteOut, summary="Write observations in order",
             responses={500: {"model": ErrorResponse, "description": "The store failed: nothing of the batch was stored."}})
async def write_observations(body: BatchWriteIn, request: Request, memory: RequestMemory = Memory) -> BatchWriteOut:
    """All or nothing: a refused observation (422) or a store failure (503 / 500) stores none of the batch, so
    the same batch can be sent again without duplicating its head."""
    observations = [o.to_observation() for o in body.observations]
    try:
        results = await memory.call(lambda engine: engine.write_many(observations))
    except StoreError as error:
        raise nothing_stored(request, error, f"the batch of {len(observations)} observations") from error
    return BatchWriteOut(results=[WriteResultOut.of(r) for r in results])


@router.post("/query", response_model=QueryOut, summary="Ranked evidence, route and trace (and optionally an answer)")
async def query(body: QueryIn, memory: RequestMemory = Memory) -> QueryOut:
    result = await memory.call(lambda engine: engine.query(body.text, k=body.k, budget=body.budget, answer=body.answer))
    return QueryOut.of(result)


@router.head("/nodes/{node_id}", include_in_schema=False)  # GET without the body (does the node exist?)
@router.get("/nodes/{node_id}", response_model=NodeViewOut, summary="A node with its edges and backlinks")
async def get_node(node_id: NodePath, memory: RequestMemory = Memory) -> NodeViewOut:
    view = await memory.call(lambda engine: engine.get(node_id))
    return NodeViewOut.of(view)


@router.patch("/nodes/{node_id}", response_model=NodeViewOut, summary="Edit a node's text (inferred links are re-assessed later, derived summaries are deleted)")
async def edit_node(body: EditIn, node_id: NodePath, memory: RequestMemory = Memory) -> NodeViewOut:
    view = await memory.call(lambda engine: engine.edit(node_id, body.content))
    return NodeViewOut.of(view)


@router.delete("/nodes/{node_id}", status_code=204, summary="Delete a node, its edges and the summaries derived from it")
async def delete_node(node_id: NodePath, memory: RequestMemory = Memory) -> Response:
    if not await memory.call(lambda engine: engine.delete(node_id)):
        raise NodeNotFoundError(node_id)
    return Response(status_code=204)


@router.put("/nodes/{node_id}/links", response_model=NodeViewOut, summary="Replace a node's explicit outgoing links")
async def set_links(body: SetLinksIn, node_id: NodePath, memory: RequestMemory = Memory) -> NodeViewOut:
    links = [(link.dst, link.relation) for link in body.links]
    view = await memory.call(lambda engine: engine.set_links(node_id, links))
    return NodeViewOut.of(view)


@router.post("/links", status_code=201, response_model=EdgeOut, summary="Add an explicit (authored) link")
async def link(body: LinkIn, memory: RequestMemory = Memory) -> EdgeOut:
    edge = await memory.call(lambda engine: engine.link(body.src, body.dst, body.relation, attrs=body.attrs))
    return EdgeOut.of(edge)


@router.delete("/links", status_code=204, summary="Remove one link")
async def unlink(
    src: NodeQuery, dst: NodeQuery, relation: Annotated[Relation, Query()], memory: RequestMemory = Memory
) -> Response:
    if not await memory.call(lambda engine: engine.unlink(src, dst, relation)):
        raise NotFoundError(f"no {relation!r} link from {src!r} to {dst!r}")
    return Response(status_code=204)


@router.post("/relink", response_model=RelinkOut, summary="Re-run pending and stale judgments (or those of the given nodes)")
async def relink(body: RelinkIn | None = None, memory: RequestMemory = Memory) -> RelinkOut:
    """What `jevmem relink` does, for a running server (one writer per database). A controller that fails again
    is no error: those nodes stay relations_pending and are listed in `pending` and `errors`. No node is started
    after the request deadline (the first excepted): the nodes not taken up are listed in `remaining`, untouched;
    call again (with those ids, or none for every pending and stale node) to go on."""
    node_ids = None if body is None else body.node_ids
    deadline = memory.deadline
    report = await memory.call(lambda engine: engine.relink(node_ids, deadline=deadline))
    return RelinkOut.of(report)


@router.head("/export", include_in_schema=False)  # the export's headers without its lines
@router.get("/export", response_class=Response, summary="Every observation as JSONL that `jevmem ingest --jsonl` reads back",
            responses={200: {"content": {EXPORT_MEDIA_TYPE: {}}, "description": "One JSON object per line, in write order; the "
                             "`x-jevmem-export` header counts what the lines do not carry (summaries, authored edges, refused links)."}})
async def export(memory: RequestMemory = Memory) -> Response:
    """`jevmem export` for a running server: one snapshot of the store (`Engine.export`). Edges are not exported: the
    engine that ingests the lines judges its own."""
    def run(engine: Any) -> tuple[str, Any]:
        out = io.StringIO()
        report = engine.export(out)
        return out.getvalue(), report

    text, report = await memory.call(run)
    counts = (f"observations={report.observations}; summaries={report.summaries}; authored_edges={report.authored_edges}; "
              f"refused_links={report.refused_links}")
    return Response(text.encode("utf-8"), media_type=EXPORT_MEDIA_TYPE, headers={"x-jevmem-export": counts})


@router.head("/stats", include_in_schema=False)
@router.get("/stats", response_model=StatsOut, summary="Node / edge counts, link statuses and controller usage")
async def stats(memory: RequestMemory = Memory) -> StatsOut:
    return StatsOut.of(await memory.call(lambda engine: engine.stats()))
