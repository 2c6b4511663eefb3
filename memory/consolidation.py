"""Periodic consolidation over a bounded neighbourhood: the recent nodes and their strongest inferred edges.

One batched controller call asks, per pair (newer memory_a, older memory_b), the CONSOLIDATION Nouls
(redundant, contradiction, obsolete, link_useful) and the representation Choice. The chosen representation
is applied only when its probability reaches `tau_representation`:

    keep_separate  nothing
    link           an inferred `semantic` edge a -> b (if the pair has none)
    supersede      an inferred `supersedes` edge a -> b and b.superseded_by = a
    merge_summary  a summary node (kind="summary", provenance = union of both) with `summary_of` edges;
                   its text comes from System Two when configured, else an extractive concatenation

Original observations are never deleted or rewritten here. A summary is derived data: when one of its sources
is deleted or its text changes, `memory.lifecycle` deletes the summary (and any summary built on it) in the
same transaction; an edit that keeps the text keeps it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from controller.errors import BackendError, InvalidRequestError
from controller.families import CONSOLIDATION_SIGNALS, REPRESENTATIONS
from controller.embedding import Embedder
from memory.config import EngineConfig
from memory.control import Controller, choice, fits, keyed, memory_state, noul
from memory.errors import ControllerOutputError, SystemTwoError
from memory.store.base import Store
from memory.types import Edge, EdgeOrigin, LinkStatus, Node
from memory.write_path import add_unless_explicit, fingerprint, is_refused, time_of

log = logging.getLogger(__name__)

# Inferred relations whose endpoints are worth a consolidation look.
CONSOLIDATE_RELATIONS: tuple[str, ...] = ("semantic", "update", "same_episode", "entity_equivalence", "causal")

Summarizer = Callable[[Sequence[str]], str]


@dataclass(frozen=True)
class ConsolidationReport:
    pairs: int
    linked: int
    superseded: int
    summaries: tuple[str, ...]
    questions: int
    signals: tuple[dict[str, float], ...] = ()  # per pair: the four Nouls (for inspection / evaluation)
    error: str | None = None


def select_pairs(store: Store, recent: Sequence[str], config: EngineConfig, done: set[tuple[str, str]]) -> list[tuple[Node, Node]]:
    """(newer, older) pairs joined by the strongest inferred edges touching the recent nodes."""
    best: dict[tuple[str, str], float] = {}
    for node_id in recent:
        for edge in [*store.edges_from(node_id, CONSOLIDATE_RELATIONS), *store.edges_to(node_id, CONSOLIDATE_RELATIONS)]:
            if edge.origin != EdgeOrigin.INFERRED or edge.src == edge.dst:
                continue
            key = (min(edge.src, edge.dst), max(edge.src, edge.dst))
            if key not in done:
                best[key] = max(best.get(key, 0.0), edge.weight)
    ranked = sorted(best, key=lambda k: (-best[k], k))
    ids = sorted({i for key in ranked for i in key})
    nodes = {n.id: n for n in store.get_nodes(ids)}
    pairs: list[tuple[Node, Node]] = []
    for x, y in ranked:
        if len(pairs) >= config.consolidation_max_pairs:
            break
        a, b = nodes.get(x), nodes.get(y)
        if a is None or b is None or a.kind != "observation" or b.kind != "observation":
            continue
        newer, older = (a, b) if a.seq > b.seq else (b, a)
        if older.superseded_by is None and fits(newer, config.max_memory_chars) and fits(older, config.max_memory_chars):
            pairs.append((newer, older))
    return pairs


def summary_node(sources: Sequence[Node], content: str, seq: int, source: str) -> Node:
    ids = sorted(n.id for n in sources)
    provenance: list[str] = []
    entities: list[str] = []
    for n in sources:
        provenance.extend(s for s in n.source_ids if s not in provenance)
        entities.extend(e for e in n.entities if e not in entities)
    times = [t for t in (time_of(n) for n in sources) if t is not None]
    return Node(
        id=summary_id(ids),
        content=content,
        observed_at=max(times) if times else None,
        event_time=None,
        speaker=None,
        source_ids=tuple(provenance),
        entities=tuple(entities),
        types={},
        fingerprint=fingerprint(content),
        seq=seq,
        link_status=LinkStatus.ASSESSED,
        metadata={"summary_of": ids, "summary_source": source},
        kind="summary",
    )


def summary_id(source_ids: Sequence[str]) -> str:
    return "s" + hashlib.blake2b("\x00".join(sorted(source_ids)).encode(), digest_size=8).hexdigest()


def consolidate(
    store: Store,
    controller: Controller,
    embedder: Embedder,
    recent: Sequence[str],
    config: EngineConfig,
    *,
    next_seq: Callable[[], int],
    summarizer: Summarizer | None = None,
    done: set[tuple[str, str]] | None = None,
) -> ConsolidationReport:
    """Judge and apply; all store changes happen in one transaction after the controller call."""
    done = done if done is not None else set()
    pairs = select_pairs(store, recent, config, done)
    if not pairs:
        return ConsolidationReport(0, 0, 0, (), 0)
    names = (*CONSOLIDATION_SIGNALS, "representation")
    requests = [({"memory_a": memory_state(a), "memory_b": memory_state(b)}, keyed(f"pair_{i}_", "consolidation", names))
                for i, (a, b) in enumerate(pairs)]
    asked = sum(len(q) for _, q in requests)
    try:
        answers = controller.ask_batch(requests)
        decisions = []
        for i, ans in enumerate(answers):
            signals = {s: noul(ans, f"pair_{i}_{s}") for s in CONSOLIDATION_SIGNALS}
            label, probs = choice(ans, f"pair_{i}_representation", REPRESENTATIONS)
            decisions.append((signals, label, probs[label]))
    except (BackendError, InvalidRequestError, ControllerOutputError) as error:
        log.warning("consolidation skipped: %s", error)
        return ConsolidationReport(len(pairs), 0, 0, (), asked, error=f"{type(error).__name__}: {error}")
    linked = superseded = 0
    summaries: list[str] = []
    with store.transaction():
        for (a, b), (signals, label, p) in zip(pairs, decisions):
            if p < config.tau_representation or label == "keep_separate":
                continue
            if label == "link":
                existing = {e.relation for e in store.edges_from(a.id) if e.dst == b.id}
                if "semantic" not in existing:
                    linked += add_unless_explicit(store, [Edge(a.id, b.id, "semantic", EdgeOrigin.INFERRED, p, a.fingerprint,
                                                               b.fingerprint, attrs={"by": "consolidation"})])
            elif label == "supersede":
                b = store.get_node(b.id) or b  # an earlier pair of this batch may have changed it
                if b.superseded_by is not None or is_refused(store, a.id, b.id, "supersedes"):
                    continue  # a supersession the user unlinked is not put back
                if not add_unless_explicit(store, [Edge(a.id, b.id, "supersedes", EdgeOrigin.INFERRED, p, a.fingerprint, b.fingerprint)]):
                    continue  # the user linked these two already (b supersedes a, say): the authored link decides
                store.update_node(replace(b, superseded_by=a.id))
                superseded += 1
            elif label == "merge_summary":
                made = _merge(store, embedder, (b, a), next_seq, summarizer, p)
                if made is not None:
                    summaries.append(made)
    done.update((min(a.id, b.id), max(a.id, b.id)) for a, b in pairs)  # once applied: a rollback leaves them owed
    return ConsolidationReport(len(pairs), linked, superseded, tuple(summaries), asked,
                               tuple(s for s, _, _ in decisions))


def _merge(store: Store, embedder: Embedder, sources: Sequence[Node], next_seq: Callable[[], int],
           summarizer: Summarizer | None, p: float) -> str | None:
    if store.get_node(summary_id([n.id for n in sources])) is not None:
        return None
    texts = [n.content for n in sources]
    source = "extractive"
    content = "\n".join(texts)
    if summarizer is not None:
        try:
            content = summarizer(texts)
            source = "system_two"
        except SystemTwoError as error:
            log.warning("System Two summary failed, keeping an extractive summary: %s", error)
            content = "\n".join(texts)
    node = summary_node(sources, content, next_seq(), source)
    store.add_node(node, embedder.embed([content])[0])
    for src in sources:
        store.add_edge(Edge(node.id, src.id, "summary_of", EdgeOrigin.INFERRED, p, node.fingerprint, src.fingerprint))
    return node.id
