"""Value types of the memory engine: observations, nodes, edges, statuses and read results.

Plain frozen dataclasses shared by the store, the write / read paths and the server schemas.
Stored text is data: nothing here interprets `content`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

# Edge relation types. Deterministic edges: temporal_next (timestamp order), entity (exact shared identifier).
# Inferred edges come from pair judgments; explicit edges are authored through `Engine.link`.
RELATIONS: tuple[str, ...] = (
    "semantic",
    "causal",
    "same_episode",
    "entity",
    "entity_equivalence",
    "temporal",
    "temporal_next",
    "update",
    "summary_of",
    "supersedes",
)
# Relations whose meaning does not depend on the edge's direction (a judgment of the other node may write the
# reverse edge): a user's refusal of one (`Engine.unlink`) covers both directions.
SYMMETRIC_RELATIONS: frozenset[str] = frozenset({"semantic", "same_episode", "entity", "entity_equivalence", "temporal"})


class EdgeOrigin(str, Enum):
    DETERMINISTIC = "deterministic"  # timestamp order, exact shared identifiers
    INFERRED = "inferred"  # a controller judgment above its threshold; carries fingerprints
    EXPLICIT = "explicit"  # authored by a user / application; never invalidated by edits


class LinkStatus(str, Enum):
    """Why a node has (or lacks) inferred links: "no link" is distinct from "not assessed"."""

    ASSESSED = "assessed"  # judged; zero or more edges were written
    EMPTY_SHORTLIST = "empty_shortlist"  # nothing to compare with (first node, or no candidates)
    OVER_BUDGET = "over_budget"  # cut by a budget: candidates, or its own text, over the state / input limit
    RELATIONS_PENDING = "relations_pending"  # controller unavailable; re-run with `relink`
    STALE = "stale"  # its text changed; inferred links were dropped and await re-assessment


@dataclass(frozen=True)
class Observation:
    """One thing to remember. `source_ids` are external ids (e.g. LoCoMo `dia_id`s) kept as provenance."""

    content: str
    observed_at: datetime | None = None
    event_time: datetime | None = None
    speaker: str | None = None
    source_ids: tuple[str, ...] = ()
    entities: tuple[str, ...] | None = None  # None: extract deterministically; () means "none"
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Node:
    id: str
    content: str
    observed_at: datetime | None
    event_time: datetime | None
    speaker: str | None
    source_ids: tuple[str, ...]
    entities: tuple[str, ...]
    types: dict[str, float]  # episodic / semantic / procedural / preference scores
    fingerprint: str  # hash of content; inferred edges remember the fingerprints they were judged on
    seq: int  # insertion order
    link_status: LinkStatus = LinkStatus.ASSESSED
    metadata: dict[str, Any] = field(default_factory=dict)
    superseded_by: str | None = None
    kind: str = "observation"  # or "summary" for consolidation summaries


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    relation: str
    origin: EdgeOrigin
    weight: float = 1.0  # probability for inferred edges
    src_fingerprint: str | None = None
    dst_fingerprint: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)  # e.g. {"temporal": "before"}


@dataclass(frozen=True)
class Evidence:
    node_id: str
    content: str
    score: float
    source_ids: tuple[str, ...]
    observed_at: datetime | None
    speaker: str | None
    via: str  # "seed:bm25", "seed:vector", "expand:semantic", ...
    depth: int


@dataclass(frozen=True)
class TraceStep:
    phase: str  # "route", "seed", "expand", "judge", "stop"
    detail: dict[str, Any]
    elapsed_ms: float


@dataclass(frozen=True)
class QueryResult:
    query: str
    evidence: tuple[Evidence, ...]  # ranked, best first
    route: dict[str, float]  # routing Noul probabilities
    active_views: tuple[str, ...]
    stopped_reason: str  # "sufficient", "not_useful", "budget", "depth"
    trace: tuple[TraceStep, ...]
    controller_requests: int
    controller_questions: int
    answer: str | None = None
    answer_source: str | None = None  # "system_two" or "extractive"


@dataclass(frozen=True)
class WriteResult:
    node_id: str
    candidates: int
    edges_written: int
    controller_questions: int
    link_status: LinkStatus
    timings_ms: dict[str, float]
    # shortlisted candidates whose pair was not judged because a state was over the size bound or the model's
    # input limit: "not assessed", as distinct from judged and not linked
    unjudged: tuple[str, ...] = ()
