"""`InMemoryStore`: the reference implementation of the `Store` protocol (dicts, brute-force cosine, BM25).

Every change goes through two primitives (`_write_node`, `_write_edge`) that keep the derived indexes in step
and, inside a transaction, log the previous value so that an exception rolls the whole write back.
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime

import numpy as np

from memory.store._common import (
    as_embedding,
    entity_key,
    entity_keys,
    index_text,
    node_time,
    normalised,
    normalised_rows,
    query_tokens,
    time_key,
)
from memory.store.errors import DuplicateNodeError, NodeNotFoundError, StoreError
from memory.types import Edge, EdgeOrigin, LinkStatus, Node

logger = logging.getLogger(__name__)

_EdgeKey = tuple[str, str, str]  # (src, dst, relation)

# BM25 parameters of controller.lexical (the reference configuration in EVALUATION.md)
_K1 = 1.2
_B = 0.75


class InMemoryStore:
    """A complete, thread-safe, non-persistent store. Meant for tests, the dev server and as the reference."""

    def __init__(self, dim: int, *, embedder: str | None = None) -> None:
        if dim <= 0:
            raise StoreError(f"dim must be positive, got {dim}")
        self.dim = dim
        self.embedder = embedder
        self._lock = threading.RLock()
        self._depth = 0
        self._undo: list[tuple[str, object, object]] = []
        self._nodes: dict[str, Node] = {}
        self._vecs: dict[str, np.ndarray] = {}
        self._edges: dict[_EdgeKey, Edge] = {}
        # derived indexes
        self._by_seq: dict[int, str] = {}
        self._out: dict[str, set[_EdgeKey]] = {}
        self._in: dict[str, set[_EdgeKey]] = {}
        self._by_entity: dict[str, set[str]] = {}
        self._by_time: dict[str, list[tuple[str, int, str]]] = {}  # kind -> sorted (time_key, seq, id) of timed nodes
        self._tf: dict[str, Counter[str]] = {}
        self._postings: dict[str, set[str]] = {}
        self._total_len = 0
        self._matrix: tuple[list[str], np.ndarray] | None = None  # (ids, unit vectors), rebuilt after a change

    # ------------------------------------------------------------------ transactions
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes; an exception undoes all of them. Nested calls join the outermost transaction."""
        with self._lock:
            outer = self._depth == 0
            self._depth += 1
            try:
                yield
            except BaseException:
                if outer:
                    self._rollback()
                raise
            finally:
                self._depth -= 1
                if outer:
                    self._undo.clear()

    def _rollback(self) -> None:
        for kind, key, previous in reversed(self._undo):
            if kind == "node":
                self._write_node(key, previous, log=False)  # type: ignore[arg-type]
            else:
                self._write_edge(key, previous, log=False)  # type: ignore[arg-type]
        self._undo.clear()

    # ------------------------------------------------------------------ primitives
    def _write_node(self, node_id: str, value: tuple[Node, np.ndarray] | None, *, log: bool = True) -> None:
        self._matrix = None
        old_node = self._nodes.get(node_id)
        if log and self._depth:
            self._undo.append(("node", node_id, None if old_node is None else (old_node, self._vecs[node_id])))
        if old_node is not None:
            self._unindex_node(old_node)
            del self._nodes[node_id], self._vecs[node_id]
        if value is not None:
            node, vec = value
            self._nodes[node_id] = node
            self._vecs[node_id] = vec
            self._index_node(node)

    def _write_edge(self, key: _EdgeKey, edge: Edge | None, *, log: bool = True) -> None:
        old = self._edges.get(key)
        if log and self._depth:
            self._undo.append(("edge", key, old))
        if old is not None:
            del self._edges[key]
            self._out[key[0]].discard(key)
            self._in[key[1]].discard(key)
        if edge is not None:
            self._edges[key] = edge
            self._out.setdefault(key[0], set()).add(key)
            self._in.setdefault(key[1], set()).add(key)

    def _index_node(self, node: Node) -> None:
        self._by_seq[node.seq] = node.id
        for key in entity_keys(node):
            self._by_entity.setdefault(key, set()).add(node.id)
        when = time_key(node_time(node))
        if when is not None:
            bisect.insort(self._by_time.setdefault(node.kind, []), (when, node.seq, node.id))
        tf = Counter(index_text(node.content, node_time(node)).split())
        self._tf[node.id] = tf
        for term in tf:
            self._postings.setdefault(term, set()).add(node.id)
        self._total_len += sum(tf.values())

    def _unindex_node(self, node: Node) -> None:
        del self._by_seq[node.seq]
        for key in entity_keys(node):
            ids = self._by_entity[key]
            ids.discard(node.id)
            if not ids:
                del self._by_entity[key]
        when = time_key(node_time(node))
        if when is not None:
            timed = self._by_time[node.kind]
            del timed[bisect.bisect_left(timed, (when, node.seq, node.id))]
            if not timed:
                del self._by_time[node.kind]
        tf = self._tf.pop(node.id)
        for term in tf:
            docs = self._postings[term]
            docs.discard(node.id)
            if not docs:
                del self._postings[term]
        self._total_len -= sum(tf.values())

    def _require(self, node_id: str) -> Node:
        node = self._nodes.get(node_id)
        if node is None:
            raise NodeNotFoundError(node_id)
        return node

    # ------------------------------------------------------------------ nodes
    def next_seq(self) -> int:
        """The smallest seq above every stored one (what the engine gives its next node)."""
        with self._lock:
            return max(self._by_seq, default=-1) + 1

    def add_node(self, node: Node, embedding: np.ndarray) -> None:
        vec = as_embedding(embedding, self.dim)
        with self.transaction():
            if node.id in self._nodes:
                raise DuplicateNodeError(node.id)
            if node.seq in self._by_seq:
                raise DuplicateNodeError(node.seq, "seq")
            self._write_node(node.id, (node, vec))

    def get_node(self, node_id: str) -> Node | None:
        with self._lock:
            return self._nodes.get(node_id)

    def get_nodes(self, node_ids: Sequence[str]) -> list[Node]:
        with self._lock:
            return [self._nodes[i] for i in node_ids if i in self._nodes]

    def update_node(self, node: Node, embedding: np.ndarray | None = None) -> None:
        vec = None if embedding is None else as_embedding(embedding, self.dim)
        with self.transaction():
            old = self._require(node.id)
            if node.seq != old.seq:
                raise StoreError(f"seq of node {node.id!r} is immutable ({old.seq} -> {node.seq})")
            self._write_node(node.id, (node, self._vecs[node.id] if vec is None else vec))

    def delete_node(self, node_id: str) -> bool:
        with self.transaction():
            if node_id not in self._nodes:
                return False
            for key in sorted(self._out.get(node_id, set()) | self._in.get(node_id, set())):
                self._write_edge(key, None)
            self._write_node(node_id, None)
            return True

    def iter_nodes(self) -> Iterator[Node]:
        with self._lock:
            nodes = sorted(self._nodes.values(), key=lambda n: n.seq)
        yield from nodes

    def count_nodes(self) -> int:
        with self._lock:
            return len(self._nodes)

    def set_link_status(self, node_id: str, status: LinkStatus) -> None:
        with self.transaction():
            node = self._require(node_id)
            self._write_node(node_id, (replace(node, link_status=LinkStatus(status)), self._vecs[node_id]))

    def nodes_with_status(self, status: LinkStatus) -> list[str]:
        with self._lock:
            wanted = LinkStatus(status)
            return [n.id for n in sorted(self._nodes.values(), key=lambda n: n.seq) if n.link_status == wanted]

    # ------------------------------------------------------------------ edges
    def add_edge(self, edge: Edge) -> None:
        """Insert or replace the edge (src, dst, relation)."""
        with self.transaction():
            self._require(edge.src)
            self._require(edge.dst)
            self._write_edge((edge.src, edge.dst, edge.relation), edge)

    def remove_edge(self, src: str, dst: str, relation: str) -> bool:
        with self.transaction():
            if (src, dst, relation) not in self._edges:
                return False
            self._write_edge((src, dst, relation), None)
            return True

    def edges_from(self, node_id: str, relations: Sequence[str] | None = None) -> list[Edge]:
        """Outgoing edges ordered by (dst, relation)."""
        with self._lock:
            keys = sorted(self._out.get(node_id, ()), key=lambda k: (k[1], k[2]))
            return [self._edges[k] for k in keys if relations is None or k[2] in relations]

    def edges_to(self, node_id: str, relations: Sequence[str] | None = None) -> list[Edge]:
        """Incoming edges (backlinks) ordered by (src, relation)."""
        with self._lock:
            keys = sorted(self._in.get(node_id, ()), key=lambda k: (k[0], k[2]))
            return [self._edges[k] for k in keys if relations is None or k[2] in relations]

    def edges_touching(self, node_ids: Sequence[str], relations: Sequence[str] | None = None) -> list[Edge]:
        """Every edge with its src or dst among `node_ids`, once, ordered by (src, dst, relation)."""
        with self._lock:
            keys = {k for i in node_ids for k in (*self._out.get(i, ()), *self._in.get(i, ()))}
            return [self._edges[k] for k in sorted(keys) if relations is None or k[2] in relations]

    def remove_edges(self, node_id: str, origin: EdgeOrigin) -> int:
        """Remove the edges of `origin` touching `node_id` in either direction; returns how many."""
        wanted = EdgeOrigin(origin)
        with self.transaction():
            keys = self._out.get(node_id, set()) | self._in.get(node_id, set())
            doomed = sorted(k for k in keys if self._edges[k].origin == wanted)
            for key in doomed:
                self._write_edge(key, None)
            return len(doomed)

    def count_edges(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(Counter(k[2] for k in self._edges).items()))

    # ------------------------------------------------------------------ retrieval channels
    def vector_search(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        q = normalised(as_embedding(query, self.dim))
        with self._lock:
            if k <= 0 or not self._nodes:
                return []
            if self._matrix is None:
                ids = sorted(self._nodes, key=lambda i: self._nodes[i].seq)
                self._matrix = (ids, normalised_rows(np.stack([self._vecs[i] for i in ids])))
            ids, matrix = self._matrix
        scores = matrix @ q  # (n,); ids are in seq order, so a stable sort breaks ties by seq
        order = np.argsort(-scores, kind="stable")[:k]
        return [(ids[j], float(scores[j])) for j in order]

    def text_search(self, query: str, k: int) -> list[tuple[str, float]]:
        terms = query_tokens(query)
        with self._lock:
            if k <= 0 or not terms or not self._nodes:
                return []
            n_docs = len(self._nodes)
            avg = self._total_len / n_docs or 1.0
            scores: dict[str, float] = {}
            for term in terms:
                docs = self._postings.get(term, set())
                idf = math.log(1.0 + (n_docs - len(docs) + 0.5) / (len(docs) + 0.5))
                for node_id in docs:
                    tf = self._tf[node_id]
                    f = tf[term]
                    norm = f * (_K1 + 1) / (f + _K1 * (1 - _B + _B * sum(tf.values()) / avg))
                    scores[node_id] = scores.get(node_id, 0.0) + idf * norm
            ranked = sorted(scores.items(), key=lambda x: (-x[1], self._nodes[x[0]].seq))
            return ranked[:k]

    def nodes_with_entity(self, entity: str, limit: int) -> list[str]:
        """Nodes carrying `entity` (case-insensitive), most recent (highest seq) first."""
        with self._lock:
            ids = self._by_entity.get(entity_key(entity), set())
            ranked = sorted(ids, key=lambda i: -self._nodes[i].seq)
            return ranked[: max(limit, 0)]

    def nodes_near_time(self, seq: int, window: int) -> list[str]:
        """Nodes whose seq differs from `seq` by 1..window, nearest first (earlier first on ties)."""
        with self._lock:
            near = [s for s in self._by_seq if s != seq and abs(s - seq) <= window]
            return [self._by_seq[s] for s in sorted(near, key=lambda s: (abs(s - seq), s))]

    def nearest_in_time(self, when: datetime, seq: int, *, after: bool, kind: str) -> str | None:
        """The node of `kind` just before / after (when, seq) in (time, seq) order: a bisection of the sorted
        (time_key, seq, id) list kept per kind (insertion is linear, a memmove; lookups are logarithmic)."""
        key = time_key(when)
        with self._lock:
            timed = self._by_time.get(kind, [])
            if after:
                i = bisect.bisect_left(timed, (key, seq + 1))  # ids sort after "", so seq + 1 skips (key, seq, *)
                return timed[i][2] if i < len(timed) else None
            i = bisect.bisect_left(timed, (key, seq))
            return timed[i - 1][2] if i > 0 else None

    def embedding(self, node_id: str) -> np.ndarray | None:
        with self._lock:
            vec = self._vecs.get(node_id)
            return None if vec is None else vec.copy()

    # ------------------------------------------------------------------ maintenance
    def check(self) -> list[str]:
        with self._lock:
            problems = [
                f"edge {k} has a missing endpoint"
                for k in self._edges
                if k[0] not in self._nodes or k[1] not in self._nodes
            ]
            if len(self._by_seq) != len(self._nodes):
                problems.append(f"{len(self._nodes)} nodes but {len(self._by_seq)} distinct seqs")
            if set(self._tf) != set(self._nodes):
                problems.append("lexical index does not match the nodes")
            if set(self._vecs) != set(self._nodes):
                problems.append("vectors do not match the nodes")
            timed = sorted((time_key(node_time(n)), n.seq, n.id, n.kind) for n in self._nodes.values() if node_time(n))
            if timed != sorted((t, s, i, k) for k, rows in self._by_time.items() for t, s, i in rows):
                problems.append("time index does not match the nodes")
            return problems

    def rebuild_vectors(self) -> None:
        """Nothing to rebuild: vectors are kept next to their nodes."""

    def close(self) -> None:
        """Nothing to release."""
