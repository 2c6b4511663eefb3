"""Read-path building blocks: hybrid seeds, budgeted expansion along one view, batched relevance judging.

A `Candidate` is a node met during one query with how it was reached (`via`, `depth`), its structural score
(normalised seed RRF, or decayed from the node it was expanded from) and, once judged, the controller's
`relevant` / `bridge` probabilities.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from controller.embedding import Embedder
from controller.families import previous_text
from memory.candidates import fuse
from memory.config import EngineConfig
from memory.control import Controller, ask_batch_within_limit, clipped, keyed, memory_state, noul
from memory.store.base import Store
from memory.types import Edge, EdgeOrigin, Node

_WORD = re.compile(r"[^\W_]+")


@dataclass
class Candidate:
    node: Node
    via: str  # "seed:bm25", "seed:vector", "seed:bm25_context", "seed:vector_context", "seed:speaker", "expand:<view>"
    depth: int
    structure: float  # in [0, 1]
    relevant: float | None = None
    bridge: float | None = None
    reached: float = 0.0  # best structure of a path back to this node (a seed the traversal meets again)

    @property
    def promise(self) -> float:
        """How worth expanding a judged candidate is."""
        return max(self.relevant or 0.0, self.bridge or 0.0)


def hybrid_ranking(store: Store, embedding: np.ndarray, text: str, depth: int, config: EngineConfig, *,
                   nodes: dict[str, Node] | None = None) -> tuple[list[str], dict[str, float], dict[str, tuple[int, str]]]:
    """Ids by fused score, best first (`candidates.fuse` of BM25 weight 1 and vector `dense_weight`, k =
    seed_rrf_k, lists `depth` deep, with `context_weight` the two `context_lists` at that weight times theirs, and
    with `named_speaker_weight` the `speaker_list` of that fusion at that weight; ties by best rank, then id), the
    scores normalised to (0, 1], and each id's best (rank, list name). `nodes`, when given, is a read-through cache
    of the memories read on the way (the caller can reuse them)."""
    nodes = {} if nodes is None else nodes
    bm25 = store.text_search(text, depth)
    vector = store.vector_search(embedding, depth) if config.dense_weight > 0 else []
    lists = {"bm25": [i for i, _ in bm25], "vector": [i for i, _ in vector]}
    weights = {"bm25": 1.0, "vector": config.dense_weight}
    if config.context_weight > 0:
        lists.update(context_lists(store, bm25, vector, config.context_depth, nodes=nodes))
        weights.update({"bm25_context": config.context_weight, "vector_context": config.context_weight * config.dense_weight})
    score = fuse(lists, weights, config.seed_rrf_k)
    top = (1.0 + config.dense_weight) * (1.0 + config.context_weight)
    if config.named_speaker_weight > 0:
        spoken = speaker_list(store, text, list(score)[: config.named_speaker_depth], nodes=nodes)
        if spoken:
            lists["speaker"] = spoken
            weights["speaker"] = config.named_speaker_weight
            top += config.named_speaker_weight
            score = fuse(lists, weights, config.seed_rrf_k)
    best: dict[str, tuple[int, str]] = {}
    for name, ids in lists.items():
        for rank, node_id in enumerate(ids):
            if node_id not in best or rank < best[node_id][0]:
                best[node_id] = (rank, name)
    top /= config.seed_rrf_k + 1
    order = sorted(score, key=lambda i: (-score[i], best[i][0], i))
    return order, {i: s / top for i, s in score.items()}, best


def named_speakers(text: str, speakers: Iterable[str]) -> set[str]:
    """The `speakers` that `text` names: every word of the name occurs among its words (case-insensitive; "Jon's"
    names "Jon")."""
    words = set(_WORD.findall(text.lower()))
    return {s for s in speakers if (name := _WORD.findall(s.lower())) and all(w in words for w in name)}


def speaker_list(store: Store, text: str, head: Sequence[str], *, nodes: dict[str, Node] | None = None) -> list[str]:
    """The memories of `head` (ids, best first) spoken by a speaker the query names, in `head`'s order; empty when
    it names none, or every speaker of the head (the list would only repeat the fusion)."""
    found = read_nodes(store, head, nodes)
    present = {n.speaker for n in found.values() if n.speaker}
    named = named_speakers(text, present)
    if not named or named == present:
        return []
    return [i for i in head if i in found and found[i].speaker in named]


def read_nodes(store: Store, ids: Sequence[str], cache: dict[str, Node] | None = None) -> dict[str, Node]:
    """The stored nodes among `ids`, in `ids`' order, reading only those not already in `cache` (which grows)."""
    cache = {} if cache is None else cache
    missing = [i for i in dict.fromkeys(ids) if i not in cache]
    if missing:
        cache.update((n.id, n) for n in store.get_nodes(missing))
    return {i: cache[i] for i in dict.fromkeys(ids) if i in cache}


def context_lists(store: Store, bm25: Sequence[tuple[str, float]], vector: Sequence[tuple[str, float]],
                  depth: int, *, nodes: dict[str, Node] | None = None) -> dict[str, list[str]]:
    """The contextual lists of the seed fusion, `context_scores` best first (ties by id); a BM25 score of 0 is left
    out, and the vector list only exists when `vector` does."""
    by_bm25, by_cosine = context_scores(store, bm25, vector, depth, nodes=nodes)
    lists = {"bm25_context": [i for i in sorted(by_bm25, key=lambda i: (-by_bm25[i], i)) if by_bm25[i] > 0]}
    if vector:
        lists["vector_context"] = sorted(by_cosine, key=lambda i: (-by_cosine[i], i))
    return lists


def context_scores(store: Store, bm25: Sequence[tuple[str, float]], vector: Sequence[tuple[str, float]],
                   depth: int, *, nodes: dict[str, Node] | None = None) -> tuple[dict[str, float], dict[str, float]]:
    """Each memory scored together with the memory before it on the same day (`previous_memory`): BM25 as the sum
    of the two scores, vector as the mean of the two cosines (a memory without one keeps its own). A reply ("5
    years already!", "It was Matt Patterson!") shares no words with a question about what it answers, while the
    turn it answers does. Computed for the top `depth` of each plain list and the memories that follow them; a
    score beyond a plain list's depth counts as 0 (BM25) or as that list's last cosine. `nodes`: as in
    `hybrid_ranking`."""
    bm = dict(bm25)
    cos = dict(vector)
    floor = min(cos.values(), default=0.0)
    head = read_nodes(store, [i for i, _ in bm25[:depth]] + [i for i, _ in vector[:depth]], nodes)
    # `previous_memory` of every head memory, and the memories whose previous memory it is, from one edge lookup
    incoming: dict[str, list[str]] = {i: [] for i in head}
    outgoing: dict[str, list[str]] = {i: [] for i, n in head.items() if n.kind == "observation"}
    for edge in store.edges_touching(list(head), ["temporal_next"]):
        if edge.dst in incoming:
            incoming[edge.dst].append(edge.src)
        if edge.src in outgoing:
            outgoing[edge.src].append(edge.dst)
    linked = {j for ids in (*incoming.values(), *outgoing.values()) for j in ids}
    known = {**read_nodes(store, [j for j in linked if j not in head], nodes), **head}

    before: dict[str, str | None] = {}
    for i, node in head.items():
        before[i] = next((j for j in incoming[i] if j in known and _precedes(known[j], node)), None)
        for j in outgoing.get(i, []):
            if j in known and known[j].kind == "observation" and _precedes(node, known[j]):
                before.setdefault(j, i)
    by_bm25 = {i: bm.get(i, 0.0) + (bm.get(p, 0.0) if p is not None else 0.0) for i, p in before.items()}
    by_cosine = {i: cos.get(i, floor) if p is None else (cos.get(i, floor) + cos.get(p, floor)) / 2
                 for i, p in before.items()}
    return by_bm25, by_cosine


def hybrid_seeds(store: Store, embedding: np.ndarray, query: str, config: EngineConfig) -> list[Candidate]:
    """The fused pool, best first: RRF of BM25 (weight 1) and vector (weight `dense_weight`), k = seed_rrf_k, with
    `context_weight` the two `context_lists` and with `named_speaker_weight` the `speaker_list` (`hybrid_ranking`);
    the memories read on the way are read once.

    Each list is fused `seed_depth` deep, not just `seed_pool` deep. With the usual k = 60 the tail of a list
    still moves the head of the fusion (on the 6 LoCoMo dev conversations, fusing 50-deep lists cost 0.04
    R_frac@10 against fusing whole rankings); with a small k the head decides and the depth hardly matters
    (k = 10, equal weights: 0.661 / 0.663 / 0.667 at depth 50 / 100 / 1000, against 0.627 for k = 60, 0.5).
    """
    nodes: dict[str, Node] = {}
    order, score, best = hybrid_ranking(store, embedding, query, max(config.seed_depth, config.seed_pool), config, nodes=nodes)
    order = order[: config.seed_pool]
    nodes = read_nodes(store, order, nodes)
    return [Candidate(nodes[i], f"seed:{best[i][1]}", 0, score[i]) for i in order if i in nodes]


def feedback_text(query: str, parents: Sequence[Candidate]) -> str:
    """The feedback search's text: the query, then the memories judged most promising, one per line."""
    return "\n".join([query, *(p.node.content for p in parents)])


def feedback_candidates(store: Store, embedder: Embedder, query: str, parents: Sequence[Candidate], budget: int,
                        claimed: set[str], depth: int, config: EngineConfig) -> list[Candidate]:
    """Up to `budget` unclaimed nodes from a hybrid search for `feedback_text` (the query with what the last round
    found), best first. This reaches evidence that shares no words or edge with the query but does with the
    evidence already found: the second hop of a multi-hop question. Structure: expand_decay x the best parent's x
    the node's normalised fused score."""
    if budget <= 0 or not parents:
        return []
    text = feedback_text(query, parents)
    order, score, _ = hybrid_ranking(store, embedder.embed([text])[0], text, max(config.seed_depth, budget), config)
    wanted = [i for i in order if i not in claimed][:budget]
    nodes = {n.id: n for n in store.get_nodes(wanted)}
    parent = max(p.structure for p in parents)
    found = []
    for node_id in wanted:
        if node_id in nodes:
            claimed.add(node_id)
            found.append(Candidate(nodes[node_id], "expand:feedback", depth, config.expand_decay * parent * score[node_id]))
    return found


def current(edge: Edge, a: Node, b: Node) -> bool:
    """An inferred edge counts only while both texts still have the fingerprints it was judged on."""
    if edge.origin != EdgeOrigin.INFERRED:
        return True
    fingerprints = {edge.src: edge.src_fingerprint, edge.dst: edge.dst_fingerprint}
    return all(fingerprints.get(n.id) in (None, n.fingerprint) for n in (a, b))


def expand_view(
    store: Store,
    frontier: Sequence[Candidate],
    view: str,
    relations: Sequence[str],
    budget: int,
    claimed: set[str],
    depth: int,
    config: EngineConfig,
) -> list[Candidate]:
    """New candidates along `relations` (both directions) from the frontier, strongest edges first."""
    found: list[Candidate] = []
    for parent in frontier:
        if len(found) >= budget:
            break
        edges = [*store.edges_from(parent.node.id, relations), *store.edges_to(parent.node.id, relations)]
        edges.sort(key=lambda e: (-e.weight, e.relation, e.src, e.dst))
        others = [e.dst if e.src == parent.node.id else e.src for e in edges]
        wanted = [o for o in dict.fromkeys(others) if o not in claimed]
        nodes = {n.id: n for n in store.get_nodes(wanted)}
        taken = 0
        for edge, other in zip(edges, others):
            if len(found) >= budget or taken >= config.expand_per_node:
                break
            node = nodes.get(other)
            if node is None or other in claimed or not current(edge, parent.node, node):
                continue
            claimed.add(other)
            taken += 1
            structure = config.expand_decay * parent.structure * min(max(edge.weight, 0.0), 1.0)
            found.append(Candidate(node, f"expand:{view}", depth, structure))
    return found


def _precedes(prev: Node, node: Node) -> bool:
    """Whether `prev`, the source of a `temporal_next` edge to `node`, is its previous memory: an observation
    of the same day (or both undated)."""
    x, y = prev.event_time or prev.observed_at, node.event_time or node.observed_at
    return prev.kind == "observation" and (x is None) == (y is None) and (x is None or x.date() == y.date())


def previous_memory(store: Store, node: Node) -> Node | None:
    """The observation written just before `node` on the same day (or both undated): the source of its incoming
    `temporal_next` edge. In a conversation, usually the turn `node` replies to."""
    for edge in store.edges_to(node.id, ["temporal_next"]):
        prev = store.get_node(edge.src)
        if prev is not None and _precedes(prev, node):
            return prev
    return None


def judge(controller: Controller, query: str, candidates: Sequence[Candidate], config: EngineConfig, *, bridge: bool = True,
          store: Store | None = None) -> None:
    """One batched call: RELEVANCE Nouls per candidate (keys candidate_{i}_relevant, and _bridge unless
    `bridge` is False: a round that cannot be expanded further has no use for it). With relevance context on
    (`config.relevance_context`, else the controller's `states.json`) and a `store`, each state also carries the
    memory before the candidate (`previous_memory`), as data like the memory itself. A candidate whose state is over
    the model's input limit stays unjudged (a seed still ranks by its hybrid score)."""
    if not candidates:
        return
    names = ("relevant", "bridge") if bridge else ("relevant",)
    # dated / with the previous memory as the controller was trained (its states.json), unless the config says
    dated = controller.state_option("relevance_dated", config.relevance_dated)
    context = controller.state_option("relevance_context", config.relevance_context)
    requests = []
    for i, cand in enumerate(candidates):
        # long texts are cut visibly
        memory = memory_state(replace(cand.node, content=clipped(cand.node.content, config.max_evidence_chars)), dated=dated)
        state = {"query": query, "memory": memory}
        prev = previous_memory(store, cand.node) if context and store is not None else None
        if prev is not None:
            state["previous"] = previous_text(prev.content)
        requests.append((state, keyed(f"candidate_{i}_", "relevance", names)))
    for i, (cand, ans) in enumerate(zip(candidates, ask_batch_within_limit(controller, requests))):
        if ans is None:  # its state is over the model's input limit: it stays unjudged, the others do not
            continue
        cand.relevant = noul(ans, f"candidate_{i}_relevant")
        cand.bridge = noul(ans, f"candidate_{i}_bridge") if bridge else None
