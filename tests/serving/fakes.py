"""Deterministic test doubles: a weight-free backend and a memory engine with the facade's surface."""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from controller.backend import BackendRequest, BackendResult, ModelInfo
from controller.errors import InputTooLongError
from controller.questions import ChoiceQuestion, NoulQuestion, ScoreQuestion, canonical_json
from memory.errors import InvalidObservationError, InvalidRelationError, NodeNotFoundError
from memory.results import NodeView, Stats
from memory.types import (
    RELATIONS, Edge, EdgeOrigin, Evidence, LinkStatus, Node, Observation, QueryResult, WriteResult, has_visible_text,
)

FAKE_INFO = ModelInfo(name="fake-1.0.0", description="Deterministic hash model for tests.", release_date="2025-01-01")


def _logit(*parts: Any) -> float:
    digest = hashlib.sha256(canonical_json(list(parts)).encode()).digest()
    return (int.from_bytes(digest[:8], "big") / 2**64 * 2 - 1) * 3


def _softmax(xs: list[float]) -> tuple[float, ...]:
    top = max(xs)
    exps = [math.exp(x - top) for x in xs]
    total = sum(exps)
    return tuple(e / total for e in exps)


@dataclass
class FakeBackend:
    """Probabilities depend only on (state, question content); never on keys, order or batch."""

    delay_s: float = 0.0  # per backend call (not per request): models a batched forward pass
    per_request_s: float = 0.0
    max_state_chars: int | None = None  # longer states raise InputTooLongError
    truncate_over: int | None = None  # longer states are answered as if cut there (an overflow policy), and say so
    info: ModelInfo = FAKE_INFO
    calls: list[int] = field(default_factory=list)  # batch size of every call
    closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        with self._lock:
            self.calls.append(len(requests))
        time.sleep(self.delay_s + self.per_request_s * len(requests))
        out = []
        for r in requests:
            state = canonical_json(r.state)
            if self.max_state_chars is not None and len(state) > self.max_state_chars:
                raise InputTooLongError(f"state of {len(state)} chars is over {self.max_state_chars}", tokens=len(state), limit=self.max_state_chars, loc=("state",))
            probs = []
            for q in r.questions:
                if isinstance(q, NoulQuestion):
                    probs.append((1 / (1 + math.exp(-_logit(state, q.to_wire()))),))
                elif isinstance(q, ChoiceQuestion):
                    probs.append(_softmax([_logit(state, q.instructions, n, d) for n, d in q.options]))
                else:
                    assert isinstance(q, ScoreQuestion)
                    probs.append(_softmax([_logit(state, q.instructions, i, d) for i, d in enumerate(q.levels)]))
            cut = max(0, len(state) - self.truncate_over) if self.truncate_over is not None else 0
            out.append(BackendResult(tuple(probs), input_tokens=len(state) // 4 + 3 * len(r.questions), truncated_tokens=cut))
        return out

    def close(self) -> None:
        self.closed = True


class FakeEngine:
    """The engine facade over dicts: enough to exercise every route (no controller, no retrieval)."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.edges: dict[tuple[str, str, str], Edge] = {}
        self.seq = 0
        self.closed = False

    def write(self, obs: Observation) -> WriteResult:
        if not has_visible_text(obs.content):  # the engine's rule (`check_observation`)
            raise InvalidObservationError("an observation needs non-empty text", obs.content)
        node_id = f"n{self.seq:04d}"
        self.nodes[node_id] = Node(node_id, obs.content, obs.observed_at, obs.event_time, obs.speaker, obs.source_ids,
                                   obs.entities or (), {"episodic": 0.5}, hashlib.sha1(obs.content.encode()).hexdigest(), self.seq,
                                   LinkStatus.EMPTY_SHORTLIST, dict(obs.metadata))
        self.seq += 1
        return WriteResult(node_id, 0, 0, 4, LinkStatus.EMPTY_SHORTLIST, {"embedding": 0.1})

    def write_many(self, observations: Sequence[Observation]) -> list[WriteResult]:
        return [self.write(o) for o in observations]

    def query(self, text: str, *, k: int = 10, budget: int | None = None, answer: bool = False) -> QueryResult:
        hits = [n for n in self.nodes.values() if set(text.lower().split()) & set(n.content.lower().split())][:k]
        evidence = tuple(Evidence(n.id, n.content, 1.0, n.source_ids, n.observed_at, n.speaker, "seed:bm25", 0) for n in hits)
        return QueryResult(text, evidence, {"semantic": 0.9}, ("semantic",), "sufficient", (), 1, 6,
                           "\n".join(e.content for e in evidence) if answer else None, "extractive" if answer else None)

    def _require(self, node_id: str) -> Node:
        if node_id not in self.nodes:
            raise NodeNotFoundError(node_id)
        return self.nodes[node_id]

    def get(self, node_id: str) -> NodeView:
        self._require(node_id)
        return NodeView(self.nodes[node_id], tuple(e for k, e in self.edges.items() if k[0] == node_id),
                        tuple(e for k, e in self.edges.items() if k[1] == node_id))

    def edit(self, node_id: str, content: str) -> NodeView:
        self.nodes[node_id] = replace(self._require(node_id), content=content, link_status=LinkStatus.STALE)
        return self.get(node_id)

    def link(self, src: str, dst: str, relation: str, *, attrs: dict[str, Any] | None = None) -> Edge:
        self._require(src), self._require(dst)
        if relation not in RELATIONS:
            raise InvalidRelationError(relation, RELATIONS)
        edge = Edge(src, dst, relation, EdgeOrigin.EXPLICIT, attrs=dict(attrs or {}))
        self.edges[(src, dst, relation)] = edge
        return edge

    def unlink(self, src: str, dst: str, relation: str) -> bool:
        return self.edges.pop((src, dst, relation), None) is not None

    def set_links(self, node_id: str, links: Sequence[tuple[str, str]]) -> NodeView:
        self._require(node_id)
        for key in [k for k, e in self.edges.items() if k[0] == node_id and e.origin == EdgeOrigin.EXPLICIT]:
            del self.edges[key]
        for dst, relation in links:
            self.link(node_id, dst, relation)
        return self.get(node_id)

    def delete(self, node_id: str) -> bool:
        if self.nodes.pop(node_id, None) is None:
            return False
        for key in [k for k in self.edges if node_id in k[:2]]:
            del self.edges[key]
        return True

    def stats(self) -> Stats:
        return Stats(len(self.nodes), {}, {}, self.seq, 0, 0, 0, 0, 0)

    def close(self) -> None:
        self.closed = True
