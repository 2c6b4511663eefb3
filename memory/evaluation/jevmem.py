"""Runs the Jev-Mem engine on one LoCoMo conversation: ingest turn by turn, query every question, measure.

The engine only ever sees what the protocol allows: each turn's `memory_text()`, its session date (event
time and observed-at), its speaker and its `dia_id` as provenance. Never the questions' categories, the
`qa` answers, observations or summaries.

Write-path quality is measured on the evidence pairs of multi-hop questions (earlier turn, later turn):
right after the later turn is written, `discover_candidates` is re-run for it against the store as it stands
(itself excluded), which reproduces the shortlist the write saw (the lexical statistics include the new node),
and records which channels found the earlier turn. After ingestion, the stored edges between the two nodes
give edge recall.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from data.locomo import Conversation, Question
from memory.evaluation.metrics import Item
from memory.ingest import turn_observation
from memory.types import EdgeOrigin, Observation, QueryResult, WriteResult

log = logging.getLogger(__name__)


class EngineLike(Protocol):
    """The part of `memory.engine.Engine` the harness uses (a fake engine implements it in tests)."""

    def write(self, obs: Observation) -> WriteResult: ...
    def query(self, text: str, *, k: int = 10, budget: int | None = None, answer: bool = False) -> QueryResult: ...
    def close(self) -> None: ...


EngineFactory = Callable[[], EngineLike]


@dataclass
class PairOutcome:
    """One multi-hop evidence pair: which channels found the earlier turn, and the edges joining the two."""

    conversation: str
    earlier: str
    later: str
    found_by: dict[str, bool] = field(default_factory=dict)  # channel -> hit, plus "pool" and "shortlist"
    relations: tuple[str, ...] = ()  # every relation stored between the two nodes (either direction)
    inferred: tuple[str, ...] = ()  # the inferred ones among them


@dataclass
class ConversationRun:
    conversation: str
    items: dict[str, list[Item]]  # question id -> returned items, best first
    routes: dict[str, dict[str, float]]  # question id -> routing probabilities
    write_ms: list[float] = field(default_factory=list)
    write_timings: list[dict[str, float]] = field(default_factory=list)
    write_candidates: list[int] = field(default_factory=list)
    write_questions: list[int] = field(default_factory=list)
    write_edges: list[int] = field(default_factory=list)
    link_status: dict[str, int] = field(default_factory=dict)
    query_ms: list[float] = field(default_factory=list)
    query_questions: list[int] = field(default_factory=list)
    query_requests: list[int] = field(default_factory=list)
    query_timings: list[dict[str, float]] = field(default_factory=list)  # per query: ms by read-path phase (its trace)
    stopped: dict[str, int] = field(default_factory=dict)
    build_s: float = 0.0
    pairs: list[PairOutcome] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


def evidence_pairs(conversation: Conversation, questions: Iterable[Question]) -> list[tuple[str, str]]:
    """(earlier, later) turn pairs among the gold turns of each question, deduplicated, in turn order."""
    position = {t.dia_id: t.index for t in conversation.turns}
    pairs: dict[tuple[str, str], None] = {}
    for q in questions:
        gold = sorted(q.evidence, key=lambda d: position[d])
        for i, earlier in enumerate(gold):
            for later in gold[i + 1 :]:
                pairs[(earlier, later)] = None
    return list(pairs)


def _candidate_hits(engine: Any, node_id: str, earlier_ids: Sequence[str]) -> dict[str, dict[str, bool]]:
    """Re-run write-time candidate discovery for `node_id`; hits for each earlier node id."""
    from memory.candidates import discover_candidates

    store = engine.store
    node = store.get_node(node_id)
    embedding = store.embedding(node_id)
    if node is None or embedding is None:
        return {}
    cands = discover_candidates(
        store, content=node.content, embedding=embedding, entities=node.entities, seq=node.seq,
        config=engine.config, speaker=node.speaker, exclude={node_id},
    )
    return {e: cands.found_by(e) for e in earlier_ids}


def _relations_between(engine: Any, a: str, b: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    store = engine.store
    edges = [e for e in store.edges_from(a) if e.dst == b] + [e for e in store.edges_to(a) if e.src == b]
    relations = tuple(sorted({e.relation for e in edges}))
    inferred = tuple(sorted({e.relation for e in edges if e.origin == EdgeOrigin.INFERRED}))
    return relations, inferred


def run_conversation(
    conversation: Conversation,
    questions: Sequence[Question],
    factory: EngineFactory,
    *,
    query_k: int = 20,
    write_quality: bool = True,
    on_step: Callable[[], None] | None = None,
) -> ConversationRun:
    """Ingest `conversation` into a fresh engine, query `questions`, and collect the figures."""
    run = ConversationRun(conversation.sample_id, items={}, routes={})
    multi_hop = [q for q in questions if q.category == 1 and len(q.evidence) >= 2]
    pairs = evidence_pairs(conversation, multi_hop) if write_quality else []
    partners: dict[str, list[str]] = {}
    for earlier, later in pairs:
        partners.setdefault(later, []).append(earlier)
    node_of: dict[str, str] = {}
    hits: dict[tuple[str, str], dict[str, bool]] = {}
    engine = factory()
    try:
        # write-path quality needs the real engine's store and config; a fake engine skips it
        can_inspect = write_quality and hasattr(engine, "store") and hasattr(engine, "config")
        for turn in conversation.turns:
            t0 = time.perf_counter()
            result = engine.write(turn_observation(turn))
            run.write_ms.append((time.perf_counter() - t0) * 1000.0)
            run.write_timings.append(dict(result.timings_ms))
            run.write_candidates.append(result.candidates)
            run.write_questions.append(result.controller_questions)
            run.write_edges.append(result.edges_written)
            status = getattr(result.link_status, "value", str(result.link_status))
            run.link_status[status] = run.link_status.get(status, 0) + 1
            node_of[turn.dia_id] = result.node_id
            if can_inspect and turn.dia_id in partners:
                found = _candidate_hits(engine, result.node_id, [node_of[e] for e in partners[turn.dia_id]])
                for e_dia in partners[turn.dia_id]:
                    if node_of[e_dia] in found:
                        hits[(e_dia, turn.dia_id)] = found[node_of[e_dia]]
            if on_step is not None:
                on_step()
        run.build_s = sum(run.write_ms) / 1000.0  # the writes alone, not the write-quality probes
        for earlier, later in pairs:
            outcome = PairOutcome(conversation.sample_id, earlier, later, found_by=hits.get((earlier, later), {}))
            if can_inspect:
                outcome.relations, outcome.inferred = _relations_between(engine, node_of[later], node_of[earlier])
            run.pairs.append(outcome)
        for q in questions:
            t0 = time.perf_counter()
            result = engine.query(q.question, k=query_k)
            run.query_ms.append((time.perf_counter() - t0) * 1000.0)
            run.query_questions.append(result.controller_questions)
            run.query_requests.append(result.controller_requests)
            phases: dict[str, float] = {}
            for step in result.trace:
                phases[step.phase] = phases.get(step.phase, 0.0) + step.elapsed_ms
            run.query_timings.append(phases)
            run.stopped[result.stopped_reason] = run.stopped.get(result.stopped_reason, 0) + 1
            run.items[q.qid] = [Item(tuple(e.source_ids), e.content) for e in result.evidence]
            run.routes[q.qid] = dict(result.route)
            if on_step is not None:
                on_step()
        stats = getattr(engine, "stats", None)
        if callable(stats):
            s = stats()
            run.stats = {"nodes": s.nodes, "edges": dict(s.edges), "consolidations": s.consolidations, "summaries": s.summaries}
    finally:
        engine.close()
    return run
