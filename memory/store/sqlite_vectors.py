"""The faiss side of `SQLiteStore` (a mixin): loading, rebuilding, syncing and saving its vector index, and the
bookkeeping every vector write does (the vector generation and the vectors' digest, `sqlite_digest`).

The index is derived from the embedding BLOBs. A saved one is loaded only when its header matches the database
(generation, count, store id, digest of the vectors) and its bytes match their checksum (`VectorIndex.load`);
otherwise it is rebuilt, with a log line. While the store is open, a change of the vector generation by another
connection rebuilds it before the next search or write.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memory.store import sqlite_check as maintenance
from memory.store import sqlite_digest as digests
from memory.store import sqlite_schema as schema
from memory.store._common import as_embedding
from memory.store.errors import StoreConfigError, StoreError
from memory.store.vectors import VectorIndex

logger = logging.getLogger(__name__)


class VectorSync:
    path: Path
    dim: int
    embedder: str | None
    vectors_path: Path
    _conn: sqlite3.Connection
    _lock: threading.RLock
    _vectors: VectorIndex
    _store_id: str
    _persist_vectors: bool
    _depth: int
    _indexed_generation: int  # the vector generation the faiss index reflects (set when it is built)
    _file_generation: int  # the vector generation the saved index file holds (set on load and save)
    _pending_bumps: int  # generation bumps of the open transaction, counted on commit

    if TYPE_CHECKING:  # provided by SQLiteStore
        def _reading(self, operation: str) -> AbstractContextManager[None]: ...
        def _writing(self, operation: str) -> AbstractContextManager[None]: ...
        def count_nodes(self) -> int: ...

    def _generation(self) -> int:
        return schema.vector_generation(self._conn)

    def _load_or_rebuild_vectors(self) -> None:
        generation, count = self._generation(), self.count_nodes()
        recorded = digests.current(self._conn)
        if self._persist_vectors and self._vectors.load(self.vectors_path, generation=generation, count=count,
                                                        store_id=self._store_id,
                                                        vectors_digest="" if recorded is None else str(recorded)):
            self._indexed_generation = self._file_generation = generation
            return
        if self._persist_vectors and self.vectors_path.exists():
            upgrade = self._vectors.refusal.startswith("it was saved before")
            logger.log(logging.INFO if upgrade else logging.WARNING,
                       "vector index %s is out of date or not this store's (%s); rebuilding it from %s",
                       self.vectors_path, self._vectors.refusal, self.path)
        elif self._persist_vectors and count:
            logger.info("vector index %s is missing; rebuilding it from %s", self.vectors_path, self.path)
        self.rebuild_vectors()

    def _sync_vectors(self) -> None:
        """Outside a transaction of this object's: rebuild the index when another connection (another process)
        changed a vector since it was built, so a search never misses, or finds deleted, nodes."""
        if self._depth or getattr(self, "_vectors", None) is None:
            return
        generation = self._generation()
        if generation == self._indexed_generation:
            return
        stored = schema.recorded_embedder(self._conn)
        if self.embedder is not None and stored != self.embedder:  # `jevmem reembed` ran elsewhere
            raise StoreConfigError(f"store {self.path} was re-embedded with {stored!r} by another process while open "
                                   f"here with {self.embedder!r}; reopen it", self.embedder, stored)
        logger.info("store %s: vectors changed elsewhere (generation %d, index %d); rebuilding the vector index",
                    self.path, generation, self._indexed_generation)
        self.rebuild_vectors()

    def _stored_blob(self, seq: int) -> bytes | None:
        row = self._conn.execute("SELECT embedding FROM nodes WHERE seq = ?", (seq,)).fetchone()
        return None if row is None else bytes(row[0])

    def _vector_changed(self, seq: int, old: bytes | None, new: bytes | None) -> None:
        """Record, inside the open transaction, that this write took the vector of `seq` from `old` to `new` (None:
        no row): the generation moves and the digest follows, O(1). A digest that was already unknown stays so
        (the next open computes it)."""
        before = digests.current(self._conn)
        schema.bump_vector_generation(self._conn)
        self._pending_bumps += 1
        if before is not None:
            digests.record(self._conn, before.changed(seq, old, new))

    def rebuild_vectors(self) -> None:
        """Rebuild the faiss index from the embedding BLOBs in SQLite."""
        with self._reading("rebuild_vectors"):
            # read before the rows: a write elsewhere in between leaves the index marked older than it is (safe)
            generation = self._generation() - self._pending_bumps
            pages = maintenance.pages(self._conn, "SELECT seq, embedding FROM nodes")
            rows = [r for page in pages for r in page if len(r[1]) == 4 * self.dim]  # check() reports the others
            matrix = np.zeros((len(rows), self.dim), np.float32)
            for i, (_, blob) in enumerate(rows):
                matrix[i] = schema.blob_vector(blob, self.dim)
            self._vectors.reset(np.array([r[0] for r in rows], dtype=np.int64), matrix)
            self._indexed_generation = generation
            self._file_generation = -1  # the saved file holds the vectors before this rebuild: close saves it

    def replace_embeddings(self, seqs: Sequence[int], matrix: np.ndarray, embedder: str) -> None:
        """Store `matrix[i]` as node `seqs[i]`'s embedding for every node, record `embedder` as the store's
        embedder and rebuild the faiss index: one transaction, so a crash leaves the old vectors and name.
        `seqs` must cover every node (a store never mixes two embedders' vectors)."""
        vectors = np.stack([as_embedding(v, self.dim) for v in matrix]) if len(matrix) else np.zeros((0, self.dim), np.float32)
        with self._lock:  # no search sees the new rows with the old index
            with self._writing("replace_embeddings"):
                stored = {int(r[0]) for page in maintenance.pages(self._conn, "SELECT seq FROM nodes") for r in page}
                if stored != {int(s) for s in seqs} or len(seqs) != len(vectors):
                    raise StoreError(f"replace_embeddings needs one vector per node: {len(stored)} nodes, "
                                     f"{len(set(seqs))} seqs, {len(vectors)} vectors")
                rows = [(int(s), v.tobytes()) for s, v in zip(seqs, vectors, strict=True)]
                self._conn.executemany("UPDATE nodes SET embedding = ? WHERE seq = ?", ((b, s) for s, b in rows))
                schema.set_embedder(self._conn, embedder)
                schema.bump_vector_generation(self._conn)
                self._pending_bumps += 1
                digests.record(self._conn, digests.of_rows(rows))
            self.embedder = embedder
            self._indexed_generation = -1  # the index holds the old vectors until this rebuild: if it fails, the
            self.rebuild_vectors()  # next search or write rebuilds, and close does not save the old ones

    def _save_vectors(self, generation: int) -> None:
        """The faiss file is derived data: when it cannot be written (disk full, read-only directory) the database is
        still whole, and the next open rebuilds the index from it, so a failure is logged and not raised."""
        recorded = digests.current(self._conn)
        try:
            self._vectors.save(self.vectors_path, generation, self._store_id, "" if recorded is None else str(recorded))
            self._file_generation = generation
        except (OSError, RuntimeError) as error:  # faiss reports I/O failures as RuntimeError
            logger.warning("could not save the vector index %s (%s); the next open rebuilds it", self.vectors_path, error)
