"""The edge rows of `SQLiteStore` (a mixin: the store's connection, lock and transactions are its own)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from memory.store import sqlite_queries as queries
from memory.store import sqlite_schema as schema
from memory.store.errors import NodeNotFoundError
from memory.types import Edge, EdgeOrigin


class EdgeRows:
    """Edges keyed by (src, dst, relation); both ends must be stored nodes, and deleting a node cascades."""

    _conn: sqlite3.Connection

    if TYPE_CHECKING:  # provided by SQLiteStore
        def _reading(self, operation: str) -> AbstractContextManager[None]: ...
        def _writing(self, operation: str) -> AbstractContextManager[None]: ...
        def _seq_of(self, node_id: str) -> int | None: ...

    def add_edge(self, edge: Edge) -> None:
        """Insert or replace the edge (src, dst, relation)."""
        with self._writing("add_edge"):
            for end in (edge.src, edge.dst):
                if self._seq_of(end) is None:
                    raise NodeNotFoundError(end)
            self._conn.execute(
                f"INSERT OR REPLACE INTO edges ({schema.EDGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                schema.edge_row(edge),
            )

    def remove_edge(self, src: str, dst: str, relation: str) -> bool:
        with self._writing("remove_edge"):
            sql = "DELETE FROM edges WHERE src = ? AND dst = ? AND relation = ?"
            cur = self._conn.execute(sql, (src, dst, relation))
            return cur.rowcount > 0

    def edges_from(self, node_id: str, relations: Sequence[str] | None = None) -> list[Edge]:
        """Outgoing edges ordered by (dst, relation)."""
        with self._reading("edges_from"):
            return queries.edges(self._conn, "src", node_id, relations, "dst, relation")

    def edges_to(self, node_id: str, relations: Sequence[str] | None = None) -> list[Edge]:
        """Incoming edges (backlinks) ordered by (src, relation)."""
        with self._reading("edges_to"):
            return queries.edges(self._conn, "dst", node_id, relations, "src, relation")

    def edges_touching(self, node_ids: Sequence[str], relations: Sequence[str] | None = None) -> list[Edge]:
        """Every edge with its src or dst among `node_ids`, once, ordered by (src, dst, relation): one query per
        end and page of ids instead of one per node."""
        with self._reading("edges_touching"):
            return queries.edges_touching(self._conn, node_ids, relations)

    def remove_edges(self, node_id: str, origin: EdgeOrigin) -> int:
        """Remove the edges of `origin` touching `node_id` in either direction; returns how many."""
        with self._writing("remove_edges"):
            sql = "DELETE FROM edges WHERE (src = ? OR dst = ?) AND origin = ?"
            cur = self._conn.execute(sql, (node_id, node_id, EdgeOrigin(origin).value))
            return cur.rowcount

    def count_edges(self) -> dict[str, int]:
        with self._reading("count_edges"):
            return queries.edge_counts(self._conn)
