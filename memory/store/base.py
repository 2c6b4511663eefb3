"""The store seam: what the engine needs from persistence. SQLite + faiss is the embedded default;
a PostgreSQL + pgvector backend implements the same protocol and must pass `tests/memory/store_contract.py`.

Atomicity: `transaction()` groups one write (node + edges + status); a crash inside it leaves nothing.
Nested `transaction()` calls join the outermost one; every method that writes is atomic on its own.

Semantics every implementation keeps (checked by the contract suite):
- `add_node` rejects a duplicate id or seq (`DuplicateNodeError`) and embeddings not of shape (dim,) or not
  finite (`EmbeddingError`); `seq` is immutable; `update_node` never touches edges (fingerprint invalidation
  is the engine's job); `update_node` / `set_link_status` on a missing node raise `NodeNotFoundError`.
- `get_nodes` keeps the requested order and skips missing ids; `iter_nodes` / `nodes_with_status` go by seq.
- `add_edge` needs both endpoints (`NodeNotFoundError`) and replaces an existing (src, dst, relation);
  `edges_from` is ordered by (dst, relation), `edges_to` by (src, relation); `remove_edges` matches both
  directions.
- `vector_search`: cosine, best first, ties by seq. `text_search`: BM25 (k1=1.2, b=0.75) over
  `controller.lexical.index_tokens` terms (stemmed tokens), query text is data (no query syntax); score scales
  may differ between implementations (idf variants), the order of clear cases does not.
- `nodes_with_entity` matches case-insensitively (strip + casefold), highest seq first.
- `nodes_near_time(seq, window)`: other nodes with 0 < |s - seq| <= window, nearest first, earlier on ties.
- `nearest_in_time(when, seq, after=..., kind=...)`: among the nodes of `kind` with a time (event_time, else
  observed_at; aware times compared in UTC, naive ones as they are), the one just before (when, seq) in
  (time, seq) order, or just after it; None if there is none. Indexed: it must not scan every node.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol

import numpy as np

from memory.types import Edge, EdgeOrigin, LinkStatus, Node


class Store(Protocol):
    dim: int  # embedding dimension

    def transaction(self) -> AbstractContextManager[None]: ...

    # nodes
    def next_seq(self) -> int: ...  # one above the highest stored seq (what the engine gives its next node)
    def add_node(self, node: Node, embedding: np.ndarray) -> None: ...
    def get_node(self, node_id: str) -> Node | None: ...
    def get_nodes(self, node_ids: Sequence[str]) -> list[Node]: ...
    def update_node(self, node: Node, embedding: np.ndarray | None = None) -> None: ...
    def delete_node(self, node_id: str) -> bool: ...  # also deletes its edges
    def iter_nodes(self) -> Iterator[Node]: ...
    def count_nodes(self) -> int: ...
    def set_link_status(self, node_id: str, status: LinkStatus) -> None: ...
    def nodes_with_status(self, status: LinkStatus) -> list[str]: ...

    # edges (a pair may carry several relations; (src, dst, relation) is unique)
    def add_edge(self, edge: Edge) -> None: ...
    def remove_edge(self, src: str, dst: str, relation: str) -> bool: ...
    def edges_from(self, node_id: str, relations: Sequence[str] | None = None) -> list[Edge]: ...
    def edges_to(self, node_id: str, relations: Sequence[str] | None = None) -> list[Edge]: ...  # backlinks
    def edges_touching(self, node_ids: Sequence[str], relations: Sequence[str] | None = None) -> list[Edge]: ...  # either end, by (src, dst, relation)
    def remove_edges(self, node_id: str, origin: EdgeOrigin) -> int: ...
    def count_edges(self) -> dict[str, int]: ...  # per relation

    # retrieval channels
    def vector_search(self, query: np.ndarray, k: int) -> list[tuple[str, float]]: ...  # cosine, best first
    def text_search(self, query: str, k: int) -> list[tuple[str, float]]: ...  # BM25, best first
    def nodes_with_entity(self, entity: str, limit: int) -> list[str]: ...
    def nodes_near_time(self, seq: int, window: int) -> list[str]: ...  # by insertion order
    def nearest_in_time(self, when: datetime, seq: int, *, after: bool, kind: str) -> str | None: ...  # by time
    def embedding(self, node_id: str) -> np.ndarray | None: ...

    def check(self) -> list[str]: ...  # consistency problems found (empty list = consistent)
    def rebuild_vectors(self) -> None: ...
    def close(self) -> None: ...
