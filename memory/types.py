"""Value types of the memory engine: observations, nodes, edges, statuses and read results.

Plain frozen dataclasses shared by the store, the write / read paths and the server schemas.
Stored text is data: nothing here interprets `content` (`has_visible_text` only asks whether it shows anything).
"""

from __future__ import annotations

import unicodedata
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
# Relations that say which end comes first (cause -> effect, update -> what it updates, summary -> source,
# newer -> what it supersedes, earlier -> next): an authored link whose reverse is authored too contradicts it.
DIRECTED_RELATIONS: frozenset[str] = frozenset({"causal", "update", "summary_of", "supersedes", "temporal_next"})
# ... and those whose chains must end: a `supersedes` cycle of any length would leave every node in it superseded.
ACYCLIC_RELATIONS: frozenset[str] = frozenset({"supersedes"})

# Unicode categories that show nothing on their own: controls, format characters (zero-width space, word joiner,
# byte order mark, soft hyphen, bidi marks), and space / line / paragraph separators.
INVISIBLE_CATEGORIES: frozenset[str] = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})
# Characters of other categories that render as blank: Hangul fillers, the blank Braille pattern, the combining
# grapheme joiner and the variation selectors (marks that only modify a character before them).
BLANK_CHARACTERS: frozenset[str] = frozenset(
    "\u034f\u115f\u1160\u2800\u3164\uffa0" + "".join(map(chr, range(0xFE00, 0xFE10))) + "".join(map(chr, range(0xE0100, 0xE01F0)))
)


def has_visible_text(text: str) -> bool:
    """Whether `text` has at least one character that is neither whitespace nor in `INVISIBLE_CATEGORIES`: what
    "non-empty" means for memory text, queries and speakers. The text itself is never changed."""
    return any(not char.isspace() and char not in BLANK_CHARACTERS and unicodedata.category(char) not in INVISIBLE_CATEGORIES
               for char in text)


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
