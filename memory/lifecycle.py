"""Link lifecycle: explicit vs inferred links, edits that invalidate judgments, deletes, and `relink`.

- Explicit links are authored (`Engine.link`); they survive edits and re-embedding and need no controller.
- Inferred links carry the fingerprints of the two texts that were judged. Changing a node's text drops its
  inferred links in both directions and marks it STALE; re-embedding unchanged text keeps them.
- A consolidation summary (kind "summary", `summary_of` edges to its sources) is derived from its sources'
  texts: deleting a source, or changing its text, deletes the summaries built from it, and the summaries
  built on those, in the same transaction (`remove_derived_summaries`). Originals are never deleted that way;
  an edit that keeps the text keeps every summary.
- Backlinks are `store.edges_to` (a reverse view), never copies.
- An authored link list replaces the node's explicit links; an empty list stays empty (nothing merges old
  links back).
- An authored link that contradicts itself or the user's other authored links is refused before anything
  changes (`memory.link_rules`, `InvalidLinkError`); derived edges are never checked that way. An authored link
  overrules the engine's reverse edge of a directed relation, and an authored `supersedes` marks its target
  superseded (`settle_authored`).
- Unlinking is a user decision: `unlink_edge` removes the link (of any origin; for a symmetric relation the
  derived reverse edge too) and records the refusal on both nodes (metadata `links_refused`, persisted with the
  node). No derived edge (pair judgments, deterministic edges, `relink`, consolidation's link / supersede)
  puts it back, in either direction for a symmetric relation; an edit keeps it. An explicit link of that pair
  and relation (`add_explicit`, an authored link list) lifts it; deleting either node drops it.
- "no link" (ASSESSED with zero edges) differs from "not assessed" (EMPTY_SHORTLIST, OVER_BUDGET,
  RELATIONS_PENDING, STALE); `relink` re-runs the pending and stale ones.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from controller.embedding import Embedder
from controller.errors import BackendError, InputTooLongError
from memory.candidates import discover_candidates
from memory.config import EngineConfig
from memory.control import Controller
from memory.entities import extract_entities
from memory.errors import (
    ControllerOutputError,
    InvalidLinkError,
    InvalidObservationError,
    InvalidRelationError,
    NodeNotFoundError,
)
from memory.link_rules import check_link, check_link_list
from memory.results import RelinkReport
from memory.store.base import Store
from memory.types import (
    DIRECTED_RELATIONS, RELATIONS, SYMMETRIC_RELATIONS, Edge, EdgeOrigin, LinkStatus, Node, has_visible_text,
)
from memory.write_path import (
    REFUSALS,
    Assessment,
    add_unless_explicit,
    assess_pairs,
    check_text,
    entity_edges,
    fingerprint,
    refusals,
    temporal_edges,
    type_node,
)

log = logging.getLogger(__name__)


def require(store: Store, node_id: str) -> Node:
    node = store.get_node(node_id) if isinstance(node_id, str) else None
    if node is None:
        raise NodeNotFoundError(str(node_id))
    return node


def check_relation(relation: str) -> str:
    if not isinstance(relation, str) or relation not in RELATIONS:
        raise InvalidRelationError(relation, RELATIONS)
    return relation


def remove_edge(store: Store, edge: Edge) -> None:
    """Remove one edge, undoing what a `supersedes` edge set on its target."""
    store.remove_edge(edge.src, edge.dst, edge.relation)
    if edge.relation == "supersedes":
        target = store.get_node(edge.dst)
        if target is not None and target.superseded_by == edge.src:
            store.update_node(replace(target, superseded_by=None))


def _store_refusals(store: Store, node_id: str, refused: set[tuple[str, str, str]]) -> None:
    node = store.get_node(node_id)
    if node is None or refusals(node) == refused:
        return
    metadata = {k: v for k, v in node.metadata.items() if k != REFUSALS}
    if refused:
        metadata[REFUSALS] = [list(t) for t in sorted(refused)]
    store.update_node(replace(node, metadata=metadata))


def unlink_edge(store: Store, edge: Edge) -> None:
    """Remove a link the user withdrew and record the refusal on both nodes, inside the caller's transaction.

    For a symmetric relation the derived reverse edge goes too (an authored one stays: it was authored)."""
    remove_edge(store, edge)
    if edge.relation in SYMMETRIC_RELATIONS:
        for reverse in store.edges_from(edge.dst, [edge.relation]):
            if reverse.dst == edge.src and reverse.origin != EdgeOrigin.EXPLICIT:
                remove_edge(store, reverse)
    for end in dict.fromkeys((edge.src, edge.dst)):
        _store_refusals(store, end, refusals(store.get_node(end)) | {(edge.src, edge.dst, edge.relation)})


def lift_refusal(store: Store, src: str, dst: str, relation: str) -> None:
    """An explicit link of (src, dst, relation) lifts the user's earlier refusal of it (both directions when
    the relation is symmetric)."""
    lifted = {(src, dst, relation), *([(dst, src, relation)] if relation in SYMMETRIC_RELATIONS else [])}
    for end in dict.fromkeys((src, dst)):
        _store_refusals(store, end, refusals(store.get_node(end)) - lifted)


def drop_refusals(store: Store, node_id: str) -> None:
    """Before a node is deleted: drop its refusals from the other endpoints' records."""
    for src, dst, relation in refusals(store.get_node(node_id)):
        other = dst if src == node_id else src
        if node_id in (src, dst) and other != node_id:  # an entry not about this node was never mirrored
            _store_refusals(store, other, refusals(store.get_node(other)) - {(src, dst, relation)})


def drop_inferred(store: Store, node_id: str, keep: Iterable[Edge] = ()) -> int:
    """Remove the inferred edges touching `node_id` (both directions) except `keep`; returns how many."""
    kept = {(e.src, e.dst, e.relation) for e in keep}
    doomed = [e for e in [*store.edges_from(node_id), *store.edges_to(node_id)]
              if e.origin == EdgeOrigin.INFERRED and (e.src, e.dst, e.relation) not in kept]
    seen: set[tuple[str, str, str]] = set()
    for edge in doomed:
        key = (edge.src, edge.dst, edge.relation)
        if key not in seen:
            seen.add(key)
            remove_edge(store, edge)
    return len(seen)


def stale_inferred(store: Store, node: Node) -> list[Edge]:
    """Inferred edges of `node` judged on a text that is no longer current (on either side)."""
    edges = [*store.edges_from(node.id), *store.edges_to(node.id)]
    inferred = [e for e in edges if e.origin == EdgeOrigin.INFERRED]
    others = {n.id: n for n in store.get_nodes(sorted({e.dst if e.src == node.id else e.src for e in inferred}))}
    others[node.id] = node
    out = []
    for e in inferred:
        src, dst = others.get(e.src), others.get(e.dst)
        if src is None or dst is None or e.src_fingerprint not in (None, src.fingerprint) or e.dst_fingerprint not in (None, dst.fingerprint):
            out.append(e)
    return out


def refresh_entity_edges(store: Store, node: Node, config: EngineConfig) -> None:
    for edge in [*store.edges_from(node.id, ["entity"]), *store.edges_to(node.id, ["entity"])]:
        if edge.origin == EdgeOrigin.DETERMINISTIC:
            store.remove_edge(edge.src, edge.dst, edge.relation)
    add_unless_explicit(store, entity_edges(store, node, config))


def edit_node(store: Store, embedder: Embedder, node: Node, content: str, config: EngineConfig,
              known_names: Iterable[str] = ()) -> Node:
    """Apply an edit inside the caller's transaction; returns the stored node.

    Changed text drops the node's inferred links, marks it STALE and deletes the summaries derived from its old
    text (`remove_derived_summaries`); the same text only re-embeds it and keeps everything."""
    if not isinstance(content, str) or not has_visible_text(content):
        raise InvalidObservationError("an edit needs text with a visible character (not only whitespace, control "
                                      "or format characters)", content)
    check_text("content", content)
    embedding = embedder.embed([content])[0]
    if fingerprint(content) == node.fingerprint:
        store.update_node(node, embedding)  # same text: a re-embedding keeps every judgment
        return node
    entities = node.entities if node.metadata.get("entities_given") else extract_entities(
        content, speaker=node.speaker, known_names=known_names, limit=config.max_entities)
    remove_derived_summaries(store, node.id)
    drop_inferred(store, node.id)
    current = require(store, node.id)  # superseded_by may have been cleared just now
    edited = replace(current, content=content, fingerprint=fingerprint(content), entities=entities, types={},
                     link_status=LinkStatus.STALE)
    store.update_node(edited, embedding)
    refresh_entity_edges(store, edited, config)
    return edited


def link_attrs(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Authored attrs as a persistent store reads them back: a JSON object of UTF-8 text (`InvalidLinkError`)."""
    if attrs is None:
        return {}
    if not isinstance(attrs, Mapping):
        raise InvalidLinkError(f"link attrs must be a JSON object, got {type(attrs).__name__}", attrs)
    try:
        text = json.dumps(dict(attrs), ensure_ascii=False, sort_keys=True, allow_nan=False)
        text.encode("utf-8")
    except (TypeError, ValueError) as error:  # not JSON (NaN too), keys that cannot be sorted, lone surrogates
        raise InvalidLinkError(f"link attrs must be a JSON object: {error}", attrs) from error
    return dict(json.loads(text))


def link_entries(links: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """An authored link list as (dst, relation) pairs (`InvalidLinkError` for anything else)."""
    if isinstance(links, (str, bytes)) or not isinstance(links, Sequence):
        raise InvalidLinkError(f"links must be a list of (dst, relation) pairs, got {type(links).__name__}", links)
    for entry in links:
        if isinstance(entry, (str, bytes)) or not isinstance(entry, Sequence) or len(entry) != 2:
            raise InvalidLinkError(f"a link must be a (dst, relation) pair, got {entry!r}", entry)
    return [(dst, relation) for dst, relation in links]


def add_explicit(store: Store, src: str, dst: str, relation: str, attrs: Mapping[str, Any] | None = None) -> Edge:
    require(store, src)
    require(store, dst)
    edge = Edge(src, dst, check_relation(relation), EdgeOrigin.EXPLICIT, 1.0, attrs=link_attrs(attrs))
    check_link(store, src, dst, relation, edge.attrs)
    store.add_edge(edge)  # replaces an inferred / deterministic edge with the same (src, dst, relation)
    lift_refusal(store, src, dst, relation)
    settle_authored(store, edge)
    return edge


def settle_authored(store: Store, edge: Edge) -> None:
    """What an authored link says beyond itself. A directed relation overrules the engine's reverse edge, which
    is unlinked (and so refused, as the user's `unlink` would); `supersedes` marks its target superseded by the
    link's source, as consolidation does, so the read path ranks the target as the older memory."""
    if edge.relation in DIRECTED_RELATIONS:
        for reverse in store.edges_from(edge.dst, [edge.relation]):
            if reverse.dst == edge.src and reverse.origin != EdgeOrigin.EXPLICIT:
                unlink_edge(store, reverse)
    if edge.relation == "supersedes":
        target = require(store, edge.dst)
        if target.superseded_by != edge.src:
            store.update_node(replace(target, superseded_by=edge.src))


def set_explicit_links(store: Store, node_id: str, links: Sequence[tuple[str, str]]) -> Node:
    """Replace the explicit outgoing links of a node by `links` ((dst, relation) pairs; may be empty)."""
    links = link_entries(links)
    node = require(store, node_id)
    for dst, relation in links:
        require(store, dst)
        check_relation(relation)
    check_link_list(store, node_id, links)
    for edge in store.edges_from(node_id):
        if edge.origin == EdgeOrigin.EXPLICIT:
            remove_edge(store, edge)  # as `unlink` does: a withdrawn supersession is cleared on its target
    node = require(store, node_id)  # a target of those links may be this node (superseded_by just cleared)
    for dst, relation in links:
        edge = Edge(node_id, dst, relation, EdgeOrigin.EXPLICIT, 1.0)
        store.add_edge(edge)
        lift_refusal(store, node_id, dst, relation)
        settle_authored(store, edge)
    node = require(store, node_id)  # lifting a refusal updates its metadata
    authored = replace(node, metadata={**node.metadata, "links_authored": True})
    store.update_node(authored)
    return authored


def derived_summaries(store: Store, node_id: str) -> list[str]:
    """Ids of the summaries built from `node_id` (a `summary_of` edge from a kind "summary" node), and of the
    summaries built on those, nearest first. Observations are never in it, whatever links them."""
    found: list[str] = []
    seen = {node_id}
    frontier = [node_id]
    while frontier:
        sources = sorted({e.src for current in frontier for e in store.edges_to(current, ["summary_of"])} - seen)
        seen.update(sources)
        frontier = [n.id for n in store.get_nodes(sources) if n.kind == "summary"]
        found.extend(frontier)
    return found


def remove_derived_summaries(store: Store, node_id: str) -> list[str]:
    """Delete the summaries derived from `node_id`'s text (see `derived_summaries`) inside the caller's
    transaction, as `delete_node` deletes a node; returns their ids."""
    doomed = derived_summaries(store, node_id)
    for summary_id in doomed:
        _delete_one(store, summary_id)
    if doomed:
        log.info("removed %d summaries derived from %s", len(doomed), node_id)
    return doomed


def delete_node(store: Store, node_id: str) -> bool:
    """Delete a node and its edges; re-join the temporal chain around it and clear what it superseded.

    The summaries derived from the node (and the summaries built on those) are deleted with it, so none of its
    text is returned afterwards; the other sources of those summaries stay as they are."""
    if store.get_node(node_id) is None:
        return False
    remove_derived_summaries(store, node_id)
    _delete_one(store, node_id)
    return True


def _delete_one(store: Store, node_id: str) -> None:
    prev = [e.src for e in store.edges_to(node_id, ["temporal_next"])]
    nxt = [e.dst for e in store.edges_from(node_id, ["temporal_next"])]
    for edge in store.edges_from(node_id, ["supersedes"]):
        remove_edge(store, edge)
    drop_refusals(store, node_id)
    store.delete_node(node_id)
    if len(prev) == 1 and len(nxt) == 1 and prev[0] != nxt[0]:
        add_unless_explicit(store, [Edge(prev[0], nxt[0], "temporal_next", EdgeOrigin.DETERMINISTIC)])


@dataclass(frozen=True)
class RelinkOutcome:
    node_id: str
    assessment: Assessment
    edges_written: int
    questions: int


def relink_node(store: Store, controller: Controller, embedder: Embedder, node: Node, config: EngineConfig) -> RelinkOutcome:
    """Re-type if needed, rediscover candidates, re-judge, and replace the judged pairs' inferred edges."""
    asked = 0
    types = node.types
    if not types:
        try:
            types = type_node(controller, node.content, config, node.speaker)
            asked += 4
        except InputTooLongError as error:  # over the model's input limit: a retry cannot help, unlike pending
            over = Assessment((), LinkStatus.OVER_BUDGET, (), (), 0, str(error))
            with store.transaction():
                store.set_link_status(node.id, LinkStatus.OVER_BUDGET)
            return RelinkOutcome(node.id, over, 0, 0)
        except (BackendError, ControllerOutputError) as error:
            failed = Assessment((), LinkStatus.RELATIONS_PENDING, (), (), 4, f"{type(error).__name__}: {error}")
            with store.transaction():
                store.set_link_status(node.id, LinkStatus.RELATIONS_PENDING)
            return RelinkOutcome(node.id, failed, 0, 4)
    embedding = store.embedding(node.id)
    if embedding is None:
        embedding = embedder.embed([node.content])[0]
    cands = discover_candidates(store, content=node.content, embedding=embedding, entities=node.entities, seq=node.seq,
                                config=config, speaker=node.speaker, exclude={node.id})
    assessment = assess_pairs(controller, node, cands.nodes, config)
    asked += assessment.questions
    with store.transaction():
        for edge in stale_inferred(store, node):
            remove_edge(store, edge)
        current = require(store, node.id)
        store.update_node(replace(current, types=types, link_status=assessment.status))
        add_unless_explicit(store, temporal_edges(node, cands.nodes))
        judged = set(assessment.judged)
        for edge in [*store.edges_from(node.id), *store.edges_to(node.id)]:
            other = edge.dst if edge.src == node.id else edge.src
            if edge.origin == EdgeOrigin.INFERRED and other in judged and edge.relation not in ("supersedes", "summary_of"):
                remove_edge(store, edge)
        written = add_unless_explicit(store, assessment.edges)
    return RelinkOutcome(node.id, assessment, written, asked)


def relink_nodes(store: Store, controller: Controller, embedder: Embedder, node_ids: Sequence[str], config: EngineConfig,
                 progress: Callable[[int, int], None] | None = None, deadline: float | None = None) -> RelinkReport:
    """`relink_node` for each of `node_ids` in order (once each; a node deleted meanwhile is skipped), each in its
    own transaction. A failure is raised with a note saying how many nodes were done (committed) before it. Running
    it again is safe: a node done is no longer pending or stale, and relinking one again replaces its inferred
    links (the judged pairs' edges are removed first), never duplicates them. `progress` gets (nodes done, nodes to
    do), first with none done. With a `deadline` (a `time.monotonic()` reading) no node is started after it, the
    first excepted, so every call makes progress; the nodes left are the report's `remaining`, untouched."""
    todo = list(dict.fromkeys(node_ids))
    statuses: dict[str, LinkStatus] = {}
    errors: dict[str, str] = {}
    assessed = written = questions = 0
    if progress is not None:
        progress(0, len(todo))
    for done, node_id in enumerate(todo):
        if done and deadline is not None and time.monotonic() >= deadline:
            return RelinkReport(assessed, written, statuses, questions, errors, remaining=tuple(todo[done:]))
        try:
            node = store.get_node(node_id)
            outcome = None if node is None else relink_node(store, controller, embedder, node, config)
        except BaseException as error:
            error.add_note(f"relink: {done} of {len(todo)} nodes were relinked (and saved) before this failure")
            raise
        if outcome is not None:
            status = outcome.assessment.status
            statuses[node_id] = status
            if outcome.assessment.error and status == LinkStatus.RELATIONS_PENDING:
                errors[node_id] = outcome.assessment.error
            assessed += status == LinkStatus.ASSESSED
            written += outcome.edges_written
            questions += outcome.questions
        if progress is not None:
            progress(done + 1, len(todo))
    return RelinkReport(assessed, written, statuses, questions, errors)
