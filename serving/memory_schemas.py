"""Pydantic schemas of the memory API and their conversions from the engine's value types.

Stored text is data: `content` goes in and comes out byte for byte; nothing here interprets it. Timestamps
are accepted in ISO 8601; aware ones are converted to UTC and stored naive (one without an offset is taken
as UTC), so naive and aware values never meet in a comparison; answers carry the `Z` offset.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, is_dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, StrictBool
from pydantic_core import PydanticCustomError

from memory.results import RelinkReport
from memory.types import RELATIONS, Edge, Evidence, Node, Observation, QueryResult, TraceStep, WriteResult, has_visible_text

MAX_CONTENT_CHARS = 100_000
MAX_BATCH = 64  # one request runs the writes in order; 64 keep it to a few seconds

Relation = Literal[RELATIONS]  # type: ignore[valid-type]


def _naive_utc(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is not None:
        try:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        except OverflowError as error:  # e.g. 0001-01-01T00:00+01:00 is before year 1 in UTC
            raise PydanticCustomError("datetime_range", "Input is outside the representable date-time range once converted to UTC") from error
    return value


def _as_utc(value: datetime | None) -> datetime | None:
    """Stored timestamps are naive UTC; answers spell the offset out (RFC 3339 needs one)."""
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value


def _json_int(value: Any) -> Any:
    """JSON integers only: 3 and 3.0, not "3", true or 3.5 (pydantic's lax mode would take the first two)."""
    if isinstance(value, bool) or isinstance(value, str):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


_NUMERIC = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)\s*")  # what lax mode would read as a number


def _iso_text(value: Any) -> Any:
    """Timestamps as ISO 8601 text only (pydantic's lax mode would read a number as a Unix time)."""
    if value is not None and not isinstance(value, (str, datetime)):
        raise PydanticCustomError("datetime_type", "Input should be an ISO 8601 date-time string")
    if isinstance(value, str) and _NUMERIC.fullmatch(value):
        # Lax mode reads digits in a string as a Unix time too ("20240101" -> 1970-08-23); the only ISO 8601
        # reading of plain digits is the basic date, which `jevmem ingest` (datetime.fromisoformat) takes as well.
        try:
            return datetime.fromisoformat(value)
        except ValueError as error:
            raise PydanticCustomError("datetime_type", "Input should be an ISO 8601 date-time string, not a number") from error
    return value


# "Some visible character" (`memory.types.has_visible_text`): not whitespace, nor a control, format (zero-width
# space, BOM, soft hyphen...) or separator character, nor one that renders blank (Hangul fillers, variation
# selectors...). Spelled out, because \\s and \\p differ between Python, Rust and ECMA regex; in the Basic
# Multilingual Plane only (ECMA without the u flag has no astral ranges), so `_visible` refuses the few astral
# format characters (U+110BD, U+E0001 tags, variation selectors 17-256) with the same message.
NOT_BLANK = (r"[^\x00-\x20\x7f-\xa0\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u1680"
             r"\u180e\u2000-\u200f\u2028-\u202f\u205f-\u2064\u2066-\u206f\u2800\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0"
             r"\ufff9-\ufffb]")


def _visible(value: str) -> str:
    if not has_visible_text(value):
        raise PydanticCustomError("blank_text", "Text should have a visible character, not only whitespace, control "
                                  "or format characters")
    return value


Content = Annotated[str, Field(min_length=1, max_length=MAX_CONTENT_CHARS, pattern=NOT_BLANK), AfterValidator(_visible)]
Timestamp = Annotated[datetime | None, BeforeValidator(_iso_text), AfterValidator(_naive_utc)]
UTCTimestamp = Annotated[datetime | None, AfterValidator(_as_utc)]
NodeId = Annotated[str, Field(min_length=1, max_length=200)]
ShortText = Annotated[str, Field(min_length=1, max_length=1_000)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ObservationIn(_In):
    """One thing to remember. `entities`: omit to extract them, `[]` for none."""

    content: Content
    observed_at: Timestamp = None
    event_time: Timestamp = None
    speaker: ShortText | None = None
    source_ids: list[ShortText] = Field(default_factory=list, max_length=1_000)
    entities: list[ShortText] | None = Field(default=None, max_length=100)
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    def to_observation(self) -> Observation:
        return Observation(
            content=self.content,
            observed_at=self.observed_at,
            event_time=self.event_time,
            speaker=self.speaker,
            source_ids=tuple(self.source_ids),
            entities=None if self.entities is None else tuple(self.entities),
            metadata=dict(self.metadata),
        )


class BatchWriteIn(_In):
    observations: list[ObservationIn] = Field(min_length=1, max_length=MAX_BATCH)


class QueryIn(_In):
    text: Annotated[str, Field(min_length=1, max_length=10_000, pattern=NOT_BLANK), AfterValidator(_visible)]
    k: Annotated[int, Field(ge=1, le=100), BeforeValidator(_json_int)] = 10
    budget: Annotated[int, Field(ge=0, le=10_000), BeforeValidator(_json_int)] | None = Field(default=None, description="Expansion budget; default from the engine config.")
    answer: StrictBool = Field(default=False, description="Also synthesise an answer (System Two when configured, else extractive).")


class EditIn(_In):
    # The example gives schema-driven testers (schemathesis) a valid body: they cannot build one from NOT_BLANK alone.
    content: Content = Field(examples=["Mira: my bicycle was fixed."])


class LinkIn(_In):
    src: NodeId
    dst: NodeId
    relation: Relation
    attrs: dict[str, JsonValue] | None = None


class LinkTarget(_In):
    dst: NodeId
    relation: Relation


class SetLinksIn(_In):
    # uniqueItems documents the engine's rule (a (dst, relation) pair twice is 422, after the nodes are found).
    links: list[LinkTarget] = Field(max_length=1_000, json_schema_extra={"uniqueItems": True},
                                    description="The node's complete explicit outgoing links, each (dst, relation) once; "
                                                "[] removes them all.")


class RelinkIn(_In):
    node_ids: list[NodeId] | None = Field(
        default=None, max_length=1_000,
        description="Nodes to judge again, whatever their status; omit (or send no body) for every relations_pending and stale node.")


# --------------------------------------------------------------------------------------------------- output
class NodeOut(BaseModel):
    id: str
    content: str
    observed_at: UTCTimestamp
    event_time: UTCTimestamp
    speaker: str | None
    source_ids: list[str]
    entities: list[str]
    types: dict[str, float]
    fingerprint: str
    seq: int
    link_status: str
    metadata: dict[str, Any]
    superseded_by: str | None
    kind: str

    @classmethod
    def of(cls, node: Node) -> NodeOut:
        return cls(**jsonable({f: getattr(node, f) for f in cls.model_fields}))


class EdgeOut(BaseModel):
    src: str
    dst: str
    relation: str
    origin: str
    weight: float
    attrs: dict[str, Any]

    @classmethod
    def of(cls, edge: Edge) -> EdgeOut:
        return cls(**jsonable({f: getattr(edge, f) for f in cls.model_fields}))


class NodeViewOut(BaseModel):
    node: NodeOut
    edges: list[EdgeOut] = Field(description="Outgoing edges.")
    backlinks: list[EdgeOut] = Field(description="Incoming edges (a reverse view of the same edges).")

    @classmethod
    def of(cls, view: Any) -> NodeViewOut:
        return cls(node=NodeOut.of(view.node), edges=[EdgeOut.of(e) for e in view.edges_out], backlinks=[EdgeOut.of(e) for e in view.backlinks])


class WriteResultOut(BaseModel):
    node_id: str
    candidates: int
    edges_written: int
    controller_questions: int
    link_status: str
    timings_ms: dict[str, float]
    unjudged: list[str] = Field(default_factory=list, description="shortlisted candidates whose pair was not judged "
                                "(a state over the size bound or the model's input limit): not assessed, not 'no link'")

    @classmethod
    def of(cls, result: WriteResult) -> WriteResultOut:
        return cls(**jsonable({f: getattr(result, f) for f in cls.model_fields}))


class BatchWriteOut(BaseModel):
    results: list[WriteResultOut]


class EvidenceOut(BaseModel):
    node_id: str
    content: str
    score: float | None
    source_ids: list[str]
    observed_at: UTCTimestamp
    speaker: str | None
    via: str
    depth: int

    @classmethod
    def of(cls, evidence: Evidence) -> EvidenceOut:
        return cls(**jsonable({f: getattr(evidence, f) for f in cls.model_fields}))


class TraceStepOut(BaseModel):
    phase: str
    detail: dict[str, Any]
    elapsed_ms: float | None

    @classmethod
    def of(cls, step: TraceStep) -> TraceStepOut:
        return cls(**jsonable({"phase": step.phase, "detail": step.detail, "elapsed_ms": step.elapsed_ms}))


class QueryOut(BaseModel):
    query: str
    evidence: list[EvidenceOut]
    route: dict[str, float | None]
    active_views: list[str]
    stopped_reason: str
    trace: list[TraceStepOut]
    controller_requests: int
    controller_questions: int
    answer: str | None
    answer_source: str | None

    @classmethod
    def of(cls, result: QueryResult) -> QueryOut:
        return cls(
            query=result.query,
            evidence=[EvidenceOut.of(e) for e in result.evidence],
            route=jsonable(dict(result.route)),
            active_views=list(result.active_views),
            stopped_reason=result.stopped_reason,
            trace=[TraceStepOut.of(s) for s in result.trace],
            controller_requests=result.controller_requests,
            controller_questions=result.controller_questions,
            answer=result.answer,
            answer_source=result.answer_source,
        )


class RelinkOut(BaseModel):
    assessed: int = Field(description="Nodes whose pair judgments ran (status assessed).")
    edges_written: int = Field(description="Inferred edges written.")
    controller_questions: int
    statuses: dict[str, str] = Field(description="Node id -> link status after the run, for every node it took.")
    pending: list[str] = Field(description="Nodes still relations_pending (the controller failed); run again later.")
    errors: dict[str, str] = Field(description="Node id -> why it is still pending.")
    remaining: list[str] = Field(default_factory=list, description="Nodes not taken up before the request deadline "
                                 "(untouched); call relink again to go on.")

    @classmethod
    def of(cls, report: RelinkReport) -> RelinkOut:
        return cls(
            assessed=report.assessed,
            edges_written=report.edges_written,
            controller_questions=report.controller_questions,
            statuses=jsonable(report.statuses),
            pending=list(report.pending),
            errors=dict(report.errors),
            remaining=list(report.remaining),
        )


class StatsOut(BaseModel):
    nodes: int
    edges: dict[str, int]
    link_status: dict[str, int]
    writes: int
    consolidations: int
    summaries: int
    controller_calls: int
    controller_requests: int
    controller_questions: int

    @classmethod
    def of(cls, stats: Any) -> StatsOut:
        return cls(**jsonable(asdict(stats) if is_dataclass(stats) else dict(stats)))


def jsonable(value: Any) -> Any:
    """Plain JSON values: enums by value, tuples / sets as lists, non-finite floats as null."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool, datetime)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return jsonable(asdict(value))
    return str(value)
