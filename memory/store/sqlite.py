"""`SQLiteStore`: the embedded default. SQLite (WAL, one transaction per write) + FTS5 + a faiss index.

SQLite is the source of truth; the FTS5 rows and the faiss index are derived and rebuilt from `nodes` when
`check()` finds them out of step (on open, with a logged warning). One connection per store object, guarded by a
re-entrant lock, so worker threads may share a store; a transaction holds the lock until it ends.

Several store objects (several processes) may use one database. SQLite runs one write transaction at a time: a
writer waits up to `busy_timeout_s` for another's, then gets a `StoreUnavailableError` (transient) and nothing
of its write is kept. Each object keeps its own faiss index; when another connection has changed a vector (the
database's vector generation moved), the index is rebuilt before the next search or write, and it is saved on
close only when it reflects the database's current generation.

A new store is created in an existing directory only (`create_dirs=True` makes the missing ones): a mistyped
directory is an error, not a new empty store. A database of something else (tables, no store settings) is
refused unchanged.

The class is put together from modules of a few hundred lines each: this one opens the file, runs transactions and
holds the node rows and retrieval channels; `sqlite_edges.EdgeRows` the edge rows; `sqlite_vectors.VectorSync` the
faiss index (load or rebuild, sync, save) and the bookkeeping of every vector write (`sqlite_digest`); the SQL lives
in `sqlite_schema` (rows, settings), `sqlite_queries` (reads) and `sqlite_check` (consistency checks, repairs).

Public methods raise store errors only: a sqlite3 error comes chained in a `StoreDatabaseError` that names the
operation and the file, a `StoreUnavailableError` when it is operational (locked, disk full, I/O; `sqlite_errors`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path

import numpy as np

from controller.lexical import ANALYZER
from memory.store import sqlite_check as maintenance
from memory.store import sqlite_digest as digests
from memory.store import sqlite_errors
from memory.store import sqlite_queries as queries
from memory.store import sqlite_schema as schema
from memory.store._common import as_embedding, entity_keys, index_text, node_time, time_key
from memory.store.errors import DuplicateNodeError, NodeNotFoundError, StoreCorruptionError, StoreError
from memory.store.sqlite_edges import EdgeRows
from memory.store.sqlite_vectors import VectorSync
from memory.store.vectors import VectorIndex
from memory.types import LinkStatus, Node

logger = logging.getLogger(__name__)


class SQLiteStore(EdgeRows, VectorSync):
    """A persistent `Store` in one SQLite file (plus `<file>.faiss` when `persist_vectors`)."""

    def __init__(
        self,
        path: str | Path,
        *,
        dim: int,
        embedder: str | None = None,
        persist_vectors: bool = True,
        search_threads: int = 1,
        busy_timeout_s: float = 5.0,
        create_dirs: bool = False,
    ) -> None:
        if dim <= 0:
            raise StoreError(f"dim must be positive, got {dim}")
        if not 0 <= busy_timeout_s <= 3600:  # NaN fails too
            raise StoreError(f"busy_timeout_s must be between 0 and 3600 seconds, got {busy_timeout_s}")
        self.path = Path(path)
        self.dim = dim
        self.vectors_path = self.path.with_name(self.path.name + ".faiss")
        self._persist_vectors = persist_vectors
        self._lock = threading.RLock()
        self._depth = 0
        self._closed = False
        self._indexed_generation = -1  # the vector generation the faiss index reflects (set when it is built)
        self._file_generation = -1  # the vector generation the saved index file holds (set on load and save)
        self._pending_bumps = 0  # generation bumps of the open transaction, counted on commit
        parent = self.path.parent
        if not create_dirs and not parent.exists():
            raise StoreError(f"cannot open store at {self.path}: the directory {parent} does not exist (a new store "
                             f"is created only in an existing directory: check the path, or create it first)")
        try:
            if create_dirs:
                parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:  # a directory, a path under a file, no permission
            raise StoreError(f"cannot open store at {self.path}: {exc}") from exc
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {round(busy_timeout_s * 1000)}")
            schema.refuse_foreign(self._conn, self.path)  # before the pragmas below change the file
            for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "foreign_keys = ON"):
                self._conn.execute(f"PRAGMA {pragma}")
            with self.transaction():
                schema.create(self._conn)
                self.embedder = schema.check_meta(self._conn, self.path, dim, embedder)
                self._reindex_if_analyzer_changed()
                digests.ensure(self._conn, self.path)
            self._store_id = schema.store_id(self._conn)
            self._vectors = VectorIndex(dim, threads=search_threads)
            self._load_or_rebuild_vectors()
            self._repair_if_needed()
        except BaseException as exc:
            self._conn.close()
            if isinstance(exc, (sqlite3.DatabaseError, schema.UnreadableRowError)):
                raise StoreError(f"cannot open store at {self.path}: {exc}") from exc
            raise

    # ------------------------------------------------------------------ opening
    def _reindex_if_analyzer_changed(self) -> None:
        """A store whose lexical index was built with other index terms (`controller.lexical.ANALYZER`; a store
        written before the terms were stemmed records none) gets its FTS rows rebuilt from `nodes`, once."""
        if schema.analyzer(self._conn) == ANALYZER:
            return
        if self._conn.execute("SELECT 1 FROM nodes LIMIT 1").fetchone() is not None:
            logger.info("store %s: re-indexing its text for the %s index terms", self.path, ANALYZER)
            maintenance.rebuild_fts(self._conn)
        schema.set_analyzer(self._conn, ANALYZER)

    def _repair_if_needed(self) -> None:
        problems = self.check()
        if not problems:
            return
        if not all(p.startswith(maintenance.DERIVED) for p in problems):
            raise StoreCorruptionError(problems, path=str(self.path))
        logger.warning("store %s is inconsistent (%s); repairing derived data", self.path, "; ".join(problems))
        with self.transaction(), sqlite_errors.translated("repair", self.path):
            maintenance.repair_tables(self._conn, problems)
        if any(p.startswith("vectors:") for p in problems):
            self.rebuild_vectors()
        remaining = self.check()
        if remaining:
            raise StoreCorruptionError(remaining, path=str(self.path))

    # ------------------------------------------------------------------ transactions
    def transaction(self) -> AbstractContextManager[None]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception. Nested calls join the outer transaction."""
        return self._transaction("transaction")

    @contextmanager
    def _transaction(self, operation: str) -> Iterator[None]:
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            with sqlite_errors.translated(f"begin {operation}", self.path):
                self._conn.execute("BEGIN IMMEDIATE")
            try:  # the write lock is ours: no other connection changes a vector until COMMIT
                with sqlite_errors.translated(operation, self.path):
                    self._sync_vectors()
            except BaseException:
                self._rollback(None)
                raise
            vectors = getattr(self, "_vectors", None)
            if vectors is not None:
                vectors.begin()
            self._depth = 1
            self._pending_bumps = 0
            step = operation
            try:
                yield
                step = f"commit {operation}"
                self._conn.execute("COMMIT")
            except BaseException as error:
                self._rollback(vectors)
                if isinstance(error, sqlite3.Error):
                    raise sqlite_errors.store_error(error, step, self.path) from error
                raise
            else:
                if vectors is not None:
                    vectors.commit()
                self._indexed_generation += self._pending_bumps
            finally:
                self._depth = 0
                self._pending_bumps = 0

    def _rollback(self, vectors: VectorIndex | None) -> None:
        """Undo the open transaction in SQLite (unless SQLite already did) and in the faiss index."""
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error as error:  # the error that caused the rollback is the one to raise
            logger.error("store %s: rollback failed: %s", self.path, error)
        finally:
            if vectors is not None:
                vectors.rollback()

    @contextmanager
    def _reading(self, operation: str) -> Iterator[None]:
        """The store's lock, and sqlite3 errors raised as store errors naming `operation`."""
        with self._lock, sqlite_errors.translated(operation, self.path):
            yield

    @contextmanager
    def _writing(self, operation: str) -> Iterator[None]:
        """A transaction (joining an open one), and sqlite3 errors raised as store errors naming `operation`."""
        with self._transaction(operation), sqlite_errors.translated(operation, self.path):
            yield

    def _seq_of(self, node_id: str) -> int | None:
        return queries.seq_of(self._conn, node_id)

    def _index(self, node: Node) -> None:
        """Write the node's derived rows: its FTS body, entity keys and time key."""
        self._conn.execute("INSERT INTO nodes_fts (rowid, body) VALUES (?, ?)", (node.seq, index_text(node.content, node_time(node))))
        maintenance.insert_entities(self._conn, node.id, node.seq, entity_keys(node))
        maintenance.insert_time(self._conn, node.seq, node.kind, time_key(node_time(node)))

    # ------------------------------------------------------------------ nodes
    def next_seq(self) -> int:
        with self._reading("next_seq"):
            return int(self._conn.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM nodes").fetchone()[0])

    def add_node(self, node: Node, embedding: np.ndarray) -> None:
        vec = as_embedding(embedding, self.dim)
        with self._writing("add_node"):
            if self._seq_of(node.id) is not None:
                raise DuplicateNodeError(node.id)
            if self._conn.execute("SELECT 1 FROM nodes WHERE seq = ?", (node.seq,)).fetchone():
                raise DuplicateNodeError(node.seq, "seq")
            row = schema.node_row(node, vec)
            self._conn.execute(f"INSERT INTO nodes ({schema.NODE_COLUMNS}, embedding) VALUES ({', '.join('?' * 15)})", row)
            self._index(node)
            self._vectors.add(node.seq, vec)
            self._vector_changed(node.seq, None, row[-1])

    def get_node(self, node_id: str) -> Node | None:
        with self._reading("get_node"):
            return queries.node(self._conn, node_id)

    def get_nodes(self, node_ids: Sequence[str]) -> list[Node]:
        with self._reading("get_nodes"):
            return queries.nodes(self._conn, node_ids)

    def update_node(self, node: Node, embedding: np.ndarray | None = None) -> None:
        vec = None if embedding is None else as_embedding(embedding, self.dim)
        with self._writing("update_node"):
            seq = self._seq_of(node.id)
            if seq is None:
                raise NodeNotFoundError(node.id)
            if seq != node.seq:
                raise StoreError(f"seq of node {node.id!r} is immutable ({seq} -> {node.seq})")
            row = schema.node_row(node, vec if vec is not None else np.zeros(self.dim, np.float32))
            columns = schema.NODE_COLUMNS.split(", ")[2:] + (["embedding"] if vec is not None else [])
            values = list(row[2 : 2 + len(columns)])
            sets = ", ".join(f"{c} = ?" for c in columns)
            old = self._stored_blob(seq) if vec is not None else None
            self._conn.execute(f"UPDATE nodes SET {sets} WHERE id = ?", (*values, node.id))
            self._conn.execute("DELETE FROM nodes_fts WHERE rowid = ?", (seq,))
            self._conn.execute("DELETE FROM node_entities WHERE node_id = ?", (node.id,))
            self._conn.execute("DELETE FROM node_times WHERE seq = ?", (seq,))
            self._index(node)
            if vec is not None:
                self._vectors.add(seq, vec)
                self._vector_changed(seq, old, row[-1])

    def delete_node(self, node_id: str) -> bool:
        with self._writing("delete_node"):
            seq = self._seq_of(node_id)
            if seq is None:
                return False
            old = self._stored_blob(seq)
            self._conn.execute("DELETE FROM nodes WHERE seq = ?", (seq,))  # edges and entities cascade
            self._conn.execute("DELETE FROM nodes_fts WHERE rowid = ?", (seq,))
            self._vectors.remove(seq)
            self._vector_changed(seq, old, None)
            return True

    def iter_nodes(self) -> Iterator[Node]:
        """All nodes in seq order, read a page at a time (the lock is not held between pages)."""
        last = -(2**63)
        while True:
            with self._reading("iter_nodes"):
                page = queries.nodes_after(self._conn, last)
            if not page:
                return
            yield from page
            last = page[-1].seq

    def count_nodes(self) -> int:
        with self._reading("count_nodes"):
            return int(self._conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0])

    def set_link_status(self, node_id: str, status: LinkStatus) -> None:
        with self._writing("set_link_status"):
            sql = "UPDATE nodes SET link_status = ? WHERE id = ?"
            cur = self._conn.execute(sql, (LinkStatus(status).value, node_id))
            if cur.rowcount == 0:
                raise NodeNotFoundError(node_id)

    def nodes_with_status(self, status: LinkStatus) -> list[str]:
        with self._reading("nodes_with_status"):
            return queries.with_status(self._conn, LinkStatus(status).value)

    # ------------------------------------------------------------------ retrieval channels
    def vector_search(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        q = as_embedding(query, self.dim)
        with self._reading("vector_search"):
            self._sync_vectors()
            hits = self._vectors.search(q, k)
            ids = queries.ids_by_seq(self._conn, [s for s, _ in hits])
        return [(ids[s], score) for s, score in hits if s in ids]

    def text_search(self, query: str, k: int) -> list[tuple[str, float]]:
        """BM25 via FTS5 `bm25()` (k1=1.2, b=0.75); the MATCH expression is built from quoted tokens only."""
        with self._reading("text_search"):
            return queries.text_hits(self._conn, query, k)

    def nodes_with_entity(self, entity: str, limit: int) -> list[str]:
        """Nodes carrying `entity` (case-insensitive), most recent (highest seq) first."""
        with self._reading("nodes_with_entity"):
            return queries.entity_nodes(self._conn, entity, limit)

    def nodes_near_time(self, seq: int, window: int) -> list[str]:
        """Nodes whose seq differs from `seq` by 1..window, nearest first (earlier first on ties)."""
        with self._reading("nodes_near_time"):
            return queries.near_seq(self._conn, seq, window)

    def nearest_in_time(self, when: datetime, seq: int, *, after: bool, kind: str) -> str | None:
        """The node of `kind` just before / after (when, seq) in (time, seq) order."""
        with self._reading("nearest_in_time"):
            return queries.nearest_in_time(self._conn, when, seq, after=after, kind=kind)

    def embedding(self, node_id: str) -> np.ndarray | None:
        with self._reading("embedding"):
            row = self._conn.execute("SELECT embedding FROM nodes WHERE id = ?", (node_id,)).fetchone()
        return None if row is None else schema.blob_vector(row[0], self.dim)

    # ------------------------------------------------------------------ maintenance
    def check(self) -> list[str]:
        """Consistency problems, each prefixed by the part it concerns (empty list = consistent)."""
        with self._reading("check"):
            self._sync_vectors()  # an index behind another connection's writes is out of date, not inconsistent
            return maintenance.find_problems(self._conn, self.dim, getattr(self, "_vectors", None))

    def close(self) -> None:
        """Save the vector index (when persisted) and close the connection. Safe to call twice.

        The index is saved only when it reflects the database's current generation: after another process wrote,
        this object's index is older, and the file that process saved (or a rebuild on the next open) is right.
        It is not saved again when the file it was loaded from (or last saved to) already holds that generation.
        """
        with self._reading("close"):
            if self._closed:
                return
            self._closed = True
            try:
                if self._persist_vectors and hasattr(self, "_vectors"):
                    generation = self._generation()
                    if generation == self._indexed_generation == self._file_generation and self.vectors_path.exists():
                        pass  # the file already holds this index (a read-only session): no rewrite, no re-hash
                    elif generation == self._indexed_generation:
                        self._save_vectors(generation)
                    else:
                        logger.info("not saving %s: the store changed elsewhere since this index was built "
                                    "(generation %d, index %d)", self.vectors_path, generation, self._indexed_generation)
            finally:
                self._conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
