"""Write-time candidate discovery: five deterministic channels, weighted reciprocal-rank fusion, K_w cut.

Candidate retrieval caps what pair judgment can discover, so the channels are kept and reported: the
evaluation harness calls `discover_candidates` directly and measures recall per channel and fused.

    vector    store.vector_search(embedding)        nearest by cosine
    lexical   store.text_search(content)             BM25
    entity    store.nodes_with_entity(e) for each entity (a shared speaker alone does not count)
    temporal  store.nodes_near_time(seq, window)     nearest insertion steps
    speaker   the vector and lexical hits told by the same speaker, fused with equal weights: 87 % of the
              LoCoMo dev multi-hop evidence pairs share a speaker, so the filtered lists reach twice as deep
              (shortlist recall of those pairs at K_w = 8: 0.35 with vector + lexical alone, 0.40 with it)

fused score = sum over channels c of w_c / (rrf_k + rank_c + 1); ties break by the id's first appearance.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from memory.config import EngineConfig
from memory.entities import normalise_entity
from memory.store.base import Store
from memory.types import Node

CHANNELS: tuple[str, ...] = ("vector", "lexical", "entity", "temporal", "speaker")


@dataclass(frozen=True)
class CandidateSet:
    nodes: tuple[Node, ...]  # the shortlist: at most K_w eligible nodes, best first
    scores: dict[str, float]  # fused score of every id in `pool`
    channels: dict[str, tuple[str, ...]]  # each channel's ranked ids, before fusion and the cut
    pool: tuple[str, ...]  # every fused id, best first, before eligibility and the K_w cut
    skipped: tuple[str, ...] = field(default=())  # ineligible ids met while filling the shortlist

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(n.id for n in self.nodes)

    def found_by(self, node_id: str) -> dict[str, bool]:
        """Which channels found `node_id`, whether fusion kept it in the pool and in the shortlist."""
        hit = {name: node_id in ids for name, ids in self.channels.items()}
        hit["pool"] = node_id in self.scores
        hit["shortlist"] = node_id in self.ids
        return hit


def fuse(ranked: dict[str, Sequence[str]], weights: dict[str, float], rrf_k: int) -> dict[str, float]:
    """Weighted reciprocal-rank fusion; the dict is ordered best first (ties: first appearance)."""
    scores: dict[str, float] = {}
    first: dict[str, int] = {}
    for name, ids in ranked.items():
        w = weights.get(name, 0.0)
        if w <= 0:
            continue
        for rank, node_id in enumerate(ids):
            first.setdefault(node_id, len(first))
            scores[node_id] = scores.get(node_id, 0.0) + w / (rrf_k + rank + 1)
    order = sorted(scores, key=lambda i: (-scores[i], first[i]))
    return {i: scores[i] for i in order}


def entity_channel(store: Store, entities: Sequence[str], k: int) -> list[str]:
    """Nodes sharing the most entities first, then the most recent mention (store order)."""
    counts: dict[str, int] = {}
    best: dict[str, int] = {}
    for entity in entities:
        for pos, node_id in enumerate(store.nodes_with_entity(entity, k)):
            counts[node_id] = counts.get(node_id, 0) + 1
            best[node_id] = min(best.get(node_id, pos), pos)
    return sorted(counts, key=lambda i: (-counts[i], best[i]))[:k]


def speaker_channel(store: Store, lists: Sequence[Sequence[str]], speaker: str | None, k: int, rrf_k: int) -> list[str]:
    """The ids of `lists` whose node has `speaker` (case-insensitive), by unweighted RRF over the lists."""
    if not speaker:
        return []
    wanted = speaker.strip().lower()
    ids = list(dict.fromkeys(i for ids in lists for i in ids))
    same = {n.id for n in store.get_nodes(ids) if n.speaker and n.speaker.strip().lower() == wanted}
    ranked = {f"list{j}": [i for i in ids_ if i in same] for j, ids_ in enumerate(lists)}
    return list(fuse(ranked, dict.fromkeys(ranked, 1.0), rrf_k))[:k]


def linkable_entities(entities: Sequence[str], speaker: str | None, config: EngineConfig) -> list[str]:
    """Entities that may create entity edges / candidates (the speaker only when configured)."""
    if config.speaker_entity_edges or not speaker:
        return list(entities)
    own = normalise_entity(speaker)
    return [e for e in entities if e != own]


def discover_candidates(
    store: Store,
    *,
    content: str,
    embedding: np.ndarray,
    entities: Sequence[str],
    seq: int,
    config: EngineConfig,
    speaker: str | None = None,
    exclude: Collection[str] = (),
) -> CandidateSet:
    """Bounded, deterministic candidates for a node (`exclude` holds the node itself when it is stored)."""
    k = config.channel_k
    skip = set(exclude)
    raw: dict[str, list[str]] = {
        "vector": [i for i, _ in store.vector_search(embedding, k + len(skip))] if config.w_vector > 0 else [],
        "lexical": [i for i, _ in store.text_search(content, k + len(skip))] if config.w_lexical > 0 else [],
        "entity": entity_channel(store, linkable_entities(entities, speaker, config), k + len(skip)) if config.w_entity > 0 else [],
        "temporal": store.nodes_near_time(seq, config.temporal_window) if config.w_temporal > 0 and config.temporal_window else [],
    }
    channels = {name: tuple([i for i in ids if i not in skip][:k]) for name, ids in raw.items()}
    channels["speaker"] = tuple(
        speaker_channel(store, (channels["vector"], channels["lexical"]), speaker, k, config.rrf_k) if config.w_speaker > 0 else ()
    )
    weights = {"vector": config.w_vector, "lexical": config.w_lexical, "entity": config.w_entity,
               "temporal": config.w_temporal, "speaker": config.w_speaker}
    scores = fuse(channels, weights, config.rrf_k)
    pool = tuple(scores)
    # Fill the shortlist from the pool, skipping summaries (observations are judged against observations).
    shortlist: list[Node] = []
    skipped: list[str] = []
    start = 0
    while len(shortlist) < config.candidates_k and start < len(pool):
        chunk = pool[start : start + 2 * config.candidates_k]
        start += len(chunk)
        by_id = {n.id: n for n in store.get_nodes(chunk)}
        for node_id in chunk:
            node = by_id.get(node_id)
            if node is None or node.kind != "observation":
                skipped.append(node_id)
            elif len(shortlist) < config.candidates_k:
                shortlist.append(node)
    return CandidateSet(tuple(shortlist), scores, channels, pool, tuple(skipped))
